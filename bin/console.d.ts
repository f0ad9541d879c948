/** A 16-hex-digit hash of web/ (sizes and mtimes, its build output excepted), bin/console.js and the installed package set. */
export function consoleFingerprint(root?: string): string;
/** Builds dist/console/<fingerprint>/ (Vite) and returns that folder. */
export function buildConsole(print?: string): Promise<string>;
/** The folder of the current console build, building it first when web/ changed. */
export function ensureConsoleBuilt(): Promise<string>;
