/** Reading Keel's Prometheus text (`GET /metrics`) in tests. */

/** The value of one sample, 0 when absent: `name{a="x",b="y"} 3`. Labels must be given in full, in any order. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).sort().join(',');
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = (m[2] ?? '').match(/\w+="[^"]*"/g)?.sort().join(',') ?? '';
    if (got === want) return Number(m[3]);
  }
  return 0;
}
