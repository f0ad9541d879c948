import { PageHeader } from '../../ui';
export function Orgs() { return <PageHeader title="Orgs" />; }
export function OrgDetail(_: { id: string }) { return <PageHeader title="OrgDetail" />; }
export function Partners() { return <PageHeader title="Partners" />; }
