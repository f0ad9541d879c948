export function installLoopbackGuard(onViolation: (message: string) => void): void;
export function isLocalAddress(ip: string): boolean;
export function isLocalHost(host: string): boolean;
