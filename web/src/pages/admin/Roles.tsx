import { PageHeader } from '../../ui';
export function Roles() { return <PageHeader title="Roles" />; }
export function RoleDetail(_: { id: string }) { return <PageHeader title="RoleDetail" />; }
