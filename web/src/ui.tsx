// The console's small component kit: labelled fields that show the API's `details.fields`, buttons,
// alerts that explain an error (403, 428, 429, network) in plain words, tables and a pager.
import { createContext, useContext, useEffect, useId, useState, type SyntheticEvent, type InputHTMLAttributes, type ReactNode, type SelectHTMLAttributes, type TextareaHTMLAttributes } from 'react';
import { ApiError, api, setTokens, type Page, type TokenAnswer } from './api';
import { describeError, hasCode } from './api/errors';

/**
 * What the writes of the page in view change ("Single sign-on settings"), set by PermissionPage:
 * the sentences about a session without a second factor name it.
 */
export const MfaSubject = createContext<string | null>(null);

export function Alert({ kind = 'error', children }: { kind?: 'error' | 'info' | 'success' | 'warning'; children: ReactNode }) {
  return (
    <div className={`alert alert-${kind}`} role={kind === 'error' ? 'alert' : 'status'}>
      {children}
    </div>
  );
}

/**
 * What went wrong, above a form. `shown`: the fields the form shows beside their inputs; a refusal
 * whose every field is among them is said there alone, not again up here as "The request is not valid".
 */
export function ErrorAlert({ error, shown }: { error: unknown; shown?: readonly string[] }) {
  const subject = useContext(MfaSubject);
  if (!error) return null;
  if (shown && error instanceof ApiError) {
    const paths = Object.keys(error.fields);
    if (paths.length > 0 && paths.every((p) => shown.includes(p))) return null;
  }
  return (
    <>
      <Alert>{describeError(error, subject)}</Alert>
      {hasCode(error, 'mfa_required') && <StepUp />}
    </>
  );
}

/**
 * Upgrades the current session with a second factor in place (`POST /auth/mfa/step-up`): a session
 * signed in through SSO, or before a factor was set up. No <form> of its own: it is shown inside
 * the form whose save was refused.
 */
function StepUp() {
  const [code, setCode] = useState('');
  const [done, setDone] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const confirm = async () => {
    setError(null);
    setBusy(true);
    try {
      setTokens(await api<TokenAnswer>('POST', '/auth/mfa/step-up', { body: { code: code.trim() } }));
      setDone(true);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  if (done) return <Alert kind="success">This session is now confirmed with your second factor: save again.</Alert>;
  return (
    <div className="row" role="group" aria-label="Confirm with your second factor">
      <Field
        label="Second-factor code"
        autoComplete="one-time-code"
        value={code}
        onChange={(e) => setCode(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter') {
            e.preventDefault();
            void confirm();
          }
        }}
        error={error ? describeError(error) : undefined}
      />
      <Button type="button" kind="secondary" busy={busy} disabled={code.trim().length < 6} onClick={() => void confirm()}>
        Confirm session
      </Button>
    </div>
  );
}

/** Said beside a save button whose write needs a session with a second factor (before it fails on it). */
export function MfaNote() {
  const subject = useContext(MfaSubject);
  const what = subject ? subject.charAt(0).toLowerCase() + subject.slice(1) : 'this';
  return <p className="muted small">Changing {what} needs a session signed in with your second factor (authenticator, texted code or passkey); a session without one is refused.</p>;
}

interface Labelled {
  label: string;
  error?: string | undefined;
  hint?: ReactNode;
}

type FieldProps = InputHTMLAttributes<HTMLInputElement> & Labelled;

/** A label, the control, its hint and its error (the API's `details.fields` entry), tied by ids. */
function Labelled({ label, error, hint, id, control }: Labelled & { id: string | undefined; control: (a: { id: string; 'aria-invalid'?: true; 'aria-describedby'?: string }) => ReactNode }) {
  const auto = useId();
  const fid = id ?? auto;
  const describedBy = [error ? `${fid}-err` : '', hint ? `${fid}-hint` : ''].filter(Boolean).join(' ');
  // The API's field messages are clauses ("is too weak: …", "must be at least 8 characters"): beside
  // the field they read as one sentence with its name ("Password is too weak: …").
  const said = error && /^[a-z]/.test(error) ? `${label.replace(/\s*\([^)]*\)$/, '')} ${error}${/[.!?]$/.test(error) ? '' : '.'}` : error;
  return (
    <div className="field">
      <label htmlFor={fid}>{label}</label>
      {control({ id: fid, ...(error ? { 'aria-invalid': true as const } : {}), ...(describedBy ? { 'aria-describedby': describedBy } : {}) })}
      {hint && (
        <div className="hint" id={`${fid}-hint`}>
          {hint}
        </div>
      )}
      {error && (
        <div className="field-error" id={`${fid}-err`}>
          {said}
        </div>
      )}
    </div>
  );
}

export function Field({ label, error, hint, id, ...input }: FieldProps) {
  return <Labelled label={label} error={error} hint={hint} id={id} control={(a) => <input {...a} {...input} />} />;
}

export function TextArea({ label, error, hint, id, ...area }: TextareaHTMLAttributes<HTMLTextAreaElement> & Labelled) {
  return <Labelled label={label} error={error} hint={hint} id={id} control={(a) => <textarea {...a} {...area} />} />;
}

type SelectProps = SelectHTMLAttributes<HTMLSelectElement> & { label: string; error?: string | undefined; children: ReactNode };

export function Select({ label, error, id, children, ...select }: SelectProps) {
  return (
    <Labelled
      label={label}
      error={error}
      id={id}
      control={(a) => (
        <select {...a} {...select}>
          {children}
        </select>
      )}
    />
  );
}

export function Checkbox({ label, checked, onChange, disabled }: { label: string; checked: boolean; onChange: (v: boolean) => void; disabled?: boolean }) {
  return (
    <label className="checkbox">
      <input type="checkbox" checked={checked} disabled={disabled} onChange={(e) => onChange(e.target.checked)} /> {label}
    </label>
  );
}

/**
 * A form's submit: the browser's own validation runs first (required, type, length), then
 * `validate` (checks the browser has no attribute for: field path to message, shown like the
 * API's), then `fn`; while it runs the button is busy; an ApiError lands in `error` and its
 * `details.fields` in `fields`.
 */
export function useSubmit<T>(fn: () => Promise<T>, validate?: () => Record<string, string | false | null | undefined>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const fields = error instanceof ApiError ? error.fields : {};
  const run = async (): Promise<T | undefined> => {
    setError(null);
    const invalid = Object.entries(validate?.() ?? {}).flatMap(([path, message]) => (message ? [{ path, message }] : []));
    if (invalid.length > 0) {
      setError(new ApiError(0, 'invalid_input', 'Check the fields marked below.', { fields: invalid }));
      return undefined;
    }
    setBusy(true);
    try {
      return await fn();
    } catch (err) {
      setError(err);
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  /** For onSubmit and onClick: prevents the browser's own submit, then runs. */
  const submit = (e?: SyntheticEvent): void => {
    e?.preventDefault();
    void run();
  };
  return { submit, run, busy, error, fields, setError };
}

export function Button({ busy, children, kind = 'primary', className, ...props }: React.ButtonHTMLAttributes<HTMLButtonElement> & { busy?: boolean; kind?: 'primary' | 'secondary' | 'danger' | 'link' }) {
  return (
    <button {...props} className={`btn btn-${kind}${className ? ` ${className}` : ''}`} disabled={busy || props.disabled} aria-busy={busy || undefined}>
      {busy ? <span className="spinner" aria-hidden="true" /> : null}
      {children}
    </button>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="page-header">
      <h1>{title}</h1>
      {children && <div className="page-actions">{children}</div>}
    </div>
  );
}

export function Card({ title, children, actions }: { title?: string; children: ReactNode; actions?: ReactNode }) {
  return (
    <section className="card" aria-label={title}>
      {(title || actions) && (
        <div className="card-head">
          {title && <h2>{title}</h2>}
          {actions}
        </div>
      )}
      {children}
    </section>
  );
}

export function Loading({ label = 'Loading…' }: { label?: string }) {
  return (
    <div className="loading" role="status">
      <span className="spinner" aria-hidden="true" /> {label}
    </div>
  );
}

/** What a query shows while it loads or when it failed (never a blank page). */
export function QueryState({ query, children }: { query: { isPending: boolean; error: unknown }; children: () => ReactNode }) {
  if (query.error) return <ErrorAlert error={query.error} />;
  if (query.isPending) return <Loading />;
  return <>{children()}</>;
}

export function Pager({ pagination, onPage }: { pagination: { page: number; limit: number; total: number }; onPage: (page: number) => void }) {
  const pages = Math.max(1, Math.ceil(pagination.total / pagination.limit));
  if (pages <= 1) return <p className="muted small">{pagination.total} in all</p>;
  return (
    <nav className="pager" aria-label="Pages">
      <Button kind="secondary" disabled={pagination.page <= 1} onClick={() => onPage(pagination.page - 1)}>
        Previous
      </Button>
      <span>
        Page {pagination.page} of {pages} ({pagination.total} in all)
      </span>
      <Button kind="secondary" disabled={pagination.page >= pages} onClick={() => onPage(pagination.page + 1)}>
        Next
      </Button>
    </nav>
  );
}

/**
 * A list page's table: the query's states (error, loading), the table (its header row, an empty
 * state on a row of its own, a row per item) and the pager under it. Every paged list uses it.
 */
export function PagedTable<T>({
  query,
  label,
  className,
  columns,
  head,
  empty,
  row,
  onPage,
}: {
  query: { isPending: boolean; error: unknown; data?: Page<T> | undefined };
  label: string;
  className?: string;
  /** How many columns the header row has (the empty state spans them). */
  columns?: number;
  /** The header row (`<tr>` of `<th>`). */
  head: ReactNode;
  /** What the table says when the page is empty (a list that always holds its reader has none). */
  empty?: ReactNode;
  /** The row of one item (`<tr key=…>`). */
  row: (item: T) => ReactNode;
  onPage: (page: number) => void;
}) {
  return (
    <QueryState query={query}>
      {() => (
        <>
          <TableFrame label={label} {...(className === undefined ? {} : { className })}>
            <thead>{head}</thead>
            <tbody>
              {empty !== undefined && query.data?.data.length === 0 && (
                <tr>
                  <td colSpan={columns} className="muted">
                    {empty}
                  </td>
                </tr>
              )}
              {query.data?.data.map(row)}
            </tbody>
          </TableFrame>
          {query.data && <Pager pagination={query.data.pagination} onPage={onPage} />}
        </>
      )}
    </QueryState>
  );
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  return new Date(iso).toLocaleString();
}

/** A duration in milliseconds as people say it: "300 ms", "1 s", "5 min", "1 h 30 min", "2 days". */
export function duration(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  const parts: string[] = [];
  let rest = Math.round(ms / 1000);
  for (const [unit, size] of [['day', 86_400], ['h', 3_600], ['min', 60], ['s', 1]] as const) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n > 0) parts.push(unit === 'day' ? `${n} ${n === 1 ? 'day' : 'days'}` : `${n} ${unit}`);
  }
  return parts.slice(0, 2).join(' ');
}

export function Dialog({ title, children, onClose }: { title: string; children: ReactNode; onClose: () => void }) {
  // Focus goes back to what opened the dialog when it closes (keyboard users keep their place).
  useEffect(() => {
    const opener = document.activeElement;
    return () => {
      if (opener instanceof HTMLElement) opener.focus();
    };
  }, []);
  return (
    <div className="dialog-backdrop" onKeyDown={(e) => e.key === 'Escape' && onClose()}>
      <div className="dialog" role="dialog" aria-modal="true" aria-label={title}>
        <div className="card-head">
          <h2>{title}</h2>
          <Button kind="link" onClick={onClose} aria-label="Close">
            ✕
          </Button>
        </div>
        {children}
      </div>
    </div>
  );
}

/**
 * A table in a frame that scrolls sideways when the screen is narrower than the table: the frame is
 * a labelled region that takes focus, so a keyboard can scroll it too.
 */
export function TableFrame({ label, className, children }: { label: string; className?: string; children: ReactNode }) {
  return (
    <div className="table-wrap" role="region" aria-label={label} tabIndex={0}>
      <table aria-label={label} className={className}>
        {children}
      </table>
    </div>
  );
}
