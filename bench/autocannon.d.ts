/** The part of autocannon 9's API the benchmarks use (there is no @types/autocannon here). */
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events';

  interface Histogram {
    min: number;
    max: number;
    average: number;
    stddev: number;
    total?: number;
    p2_5: number;
    p50: number;
    p75: number;
    p90: number;
    p97_5: number;
    p99: number;
    p99_9: number;
  }

  interface RequestSpec {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    setupRequest?: (request: RequestSpec, context: Record<string, unknown>) => RequestSpec | null | undefined;
    onResponse?: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string>) => void;
  }

  interface Options {
    url: string;
    connections?: number;
    /** Requests per second across all connections (an open-loop offered rate). */
    overallRate?: number;
    duration?: number;
    amount?: number;
    timeout?: number;
    pipelining?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    title?: string;
    requests?: RequestSpec[];
    verifyBody?: (body: string) => boolean;
    initialContext?: Record<string, unknown>;
    /** Called with each connection's client once (e.g. to change its headers after each response). */
    setupClient?: (client: { setHeaders(headers: Record<string, string>): void; on(event: string, listener: () => void): void }) => void;
  }

  interface Result {
    title?: string;
    url: string;
    requests: Histogram;
    latency: Histogram;
    throughput: Histogram;
    duration: number;
    errors: number;
    timeouts: number;
    mismatches: number;
    non2xx: number;
    resets: number;
    connections: number;
    pipelining: number;
    '1xx': number;
    '2xx': number;
    '3xx': number;
    '4xx': number;
    '5xx': number;
    statusCodeStats?: Record<string, { count: number }>;
  }

  interface Instance extends EventEmitter, PromiseLike<Result> {
    stop(): void;
  }

  function autocannon(opts: Options, cb?: (err: Error | null, result: Result) => void): Instance;

  export type { Histogram, Instance, Options, RequestSpec, Result };
  export default autocannon;
}
