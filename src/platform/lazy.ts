/**
 * A module (or anything costly) loaded on first use rather than at start-up, then kept: calling
 * `import()` again on every use would still cost a trip through the module loader. A failed load is
 * forgotten so the next use retries.
 */
export function lazy<T>(load: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | null = null;
  return () => {
    if (!pending) {
      pending = load();
      pending.catch(() => {
        pending = null;
      });
    }
    return pending;
  };
}
