import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import protobuf from 'protobufjs';

/**
 * A loopback OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf), decoding each export with the
 * official OpenTelemetry definitions (test/fixtures/otlp, copied from opentelemetry-proto).
 */

const PROTO_ROOT = join(import.meta.dirname, '../fixtures/otlp');

export type AttributeValue = string | number | boolean | null;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind number: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, AttributeValue>;
  /** The status code: 0 unset, 1 ok, 2 error. */
  status: number;
  resource: Record<string, AttributeValue>;
}

export interface OtlpReceiver {
  /** The base URL (OTEL_EXPORTER_OTLP_ENDPOINT). */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests received (each a decoded ExportTraceServiceRequest). */
  requests: number;
  close(): Promise<void>;
}

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
  bytesValue?: Uint8Array;
}

interface KeyValue {
  key: string;
  value?: AnyValue;
}

function valueOf(v: AnyValue | undefined): AttributeValue {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return JSON.stringify((v.arrayValue.values ?? []).map(valueOf));
  if (v.bytesValue) return Buffer.from(v.bytesValue).toString('hex');
  return null;
}

function attributesOf(list: KeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list ?? []) out[kv.key] = valueOf(kv.value);
  return out;
}

const hex = (b: Uint8Array | undefined): string => (b && b.length > 0 ? Buffer.from(b).toString('hex') : '');

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => join(PROTO_ROOT, target);
  await root.load('opentelemetry/proto/collector/trace/v1/trace_service.proto', { keepCase: false });
  const Request = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
  const Response = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse');
  const spans: ReceivedSpan[] = [];
  const state = { requests: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces' || req.headers['content-type'] !== 'application/x-protobuf') {
        res.writeHead(404).end();
        return;
      }
      const message = Request.toObject(Request.decode(Buffer.concat(chunks)), { longs: String, arrays: true }) as {
        resourceSpans: { resource?: { attributes?: KeyValue[] }; scopeSpans: { spans: { traceId: Uint8Array; spanId: Uint8Array; parentSpanId?: Uint8Array; name: string; kind?: number; attributes?: KeyValue[]; status?: { code?: number } }[] }[] }[];
      };
      state.requests++;
      for (const rs of message.resourceSpans) {
        const resource = attributesOf(rs.resource?.attributes);
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            spans.push({
              traceId: hex(s.traceId),
              spanId: hex(s.spanId),
              parentSpanId: hex(s.parentSpanId),
              name: s.name,
              kind: s.kind ?? 0,
              attributes: attributesOf(s.attributes),
              status: s.status?.code ?? 0,
              resource,
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(Response.encode(Response.create({})).finish()));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    get requests() {
      return state.requests;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
