/** The project root (the folder holding package.json). */
export const ROOT: string;
/** A 16-hex-digit hash of src/ (sizes and mtimes, test files excepted), bin/build.js and the installed package set. */
export function fingerprint(root?: string): string;
/** Builds dist/<fingerprint>/ and returns the path of its main.js. */
export function build(print?: string): Promise<string>;
/** The path of the current bundle's main.js, building it first when the sources changed. */
export function ensureBuilt(): Promise<string>;
