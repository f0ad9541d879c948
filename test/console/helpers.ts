import { ensureConsoleBuilt } from '../../bin/console.js';

/** The built console (dist/console/<fingerprint>/), built once here when web/ changed. */
export function consoleBuild(): Promise<string> {
  return ensureConsoleBuilt();
}
