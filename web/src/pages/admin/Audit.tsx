import { PageHeader } from '../../ui';
export function Audit() { return <PageHeader title="Audit" />; }
