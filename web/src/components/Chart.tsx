// The console's one chart component (chartist, SVG): bars, stacked bars or lines over labelled
// points, with a legend in words and the same numbers as a table inside <details>, so nothing is
// shown only as a picture. The SVG is role="img" with the chart's accessible name.
import { useEffect, useId, useRef } from 'react';
import { BarChart, LineChart } from 'chartist';
import { TableFrame } from '../ui';
import 'chartist/dist/index.css';

export type ChartTone = 'ok' | 'danger' | 'warn' | 'muted' | 'accent';

export interface ChartSeries {
  name: string;
  /** One value per label; null: no value (a gap in a line). */
  values: (number | null)[];
  tone?: ChartTone;
}

export interface ChartProps {
  kind: 'bar' | 'stacked' | 'line';
  /** The chart's accessible name and heading. */
  title: string;
  /** One sentence read with the name: what the chart shows in short (e.g. the totals). */
  summary: string;
  labels: string[];
  series: ChartSeries[];
  /** Appended to values in the table ("ms"). */
  unit?: string;
  /** Show every n-th x label (the table always has them all). */
  labelEvery?: number;
  /** The table's first column heading. */
  labelHeading?: string;
}

/**
 * chartist writes two inline `style` attributes (the SVG's size, its labels' overflow); the console's
 * CSP (`style-src 'self'`) refuses style attributes but not styles set through the CSSOM, so on SVG
 * elements a `style` attribute is written as `style.cssText` instead (same result, no inline style).
 */
let patched = false;
function cspSafeSvgStyles(): void {
  if (patched || typeof SVGElement === 'undefined') return;
  patched = true;
  const setAttribute = Object.getOwnPropertyDescriptor(Element.prototype, 'setAttribute')?.value as (this: Element, name: string, value: string) => void;
  SVGElement.prototype.setAttribute = function (this: SVGElement, name: string, value: string) {
    if (name.toLowerCase() === 'style') {
      this.style.cssText = value;
      return;
    }
    setAttribute.call(this, name, value);
  };
}

const TONES: ChartTone[] = ['accent', 'danger', 'warn', 'muted', 'ok'];

export function Chart({ kind, title, summary, labels, series, unit = '', labelEvery = 1, labelHeading = 'Label' }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const id = useId();
  const name = `${title}. ${summary}`;
  const tones = series.map((s, i) => s.tone ?? TONES[i % TONES.length] ?? 'accent');
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    cspSafeSvgStyles();
    const data = { labels, series: series.map((s) => s.values) };
    const common = {
      height: '220px',
      chartPadding: { top: 10, right: 10, bottom: 0, left: 0 },
      axisX: { showGrid: false, labelInterpolationFnc: (v: unknown, i: number) => (i % labelEvery === 0 ? String(v) : null) },
      axisY: { onlyInteger: kind !== 'line' },
      low: 0,
    };
    const chart = kind === 'line' ? new LineChart(el, data, { ...common, showPoint: true, lineSmooth: false }) : new BarChart(el, data, { ...common, stackBars: kind === 'stacked' });
    chart.on('created', () => {
      const svg = el.querySelector('svg');
      if (!svg) return;
      svg.setAttribute('role', 'img');
      svg.setAttribute('aria-label', name);
      // Series classes (ct-series-a, -b…) take the tones' colours (styles.css `.chart`).
      svg.querySelectorAll('.ct-series').forEach((g, i) => g.classList.add(`tone-${tones[i] ?? 'accent'}`));
    });
    return () => {
      chart.detach();
      el.replaceChildren();
    };
  }, [kind, labels, series, name, labelEvery, tones]);
  const value = (v: number | null) => (v === null ? '—' : `${v.toLocaleString()}${unit ? ` ${unit}` : ''}`);
  return (
    <figure className="chart" aria-labelledby={`${id}-title`}>
      <figcaption id={`${id}-title`}>{title}</figcaption>
      <div ref={box} className="chart-box" />
      <ul className="chart-legend" aria-label={`${title}: legend`}>
        {series.map((s, i) => (
          <li key={s.name}>
            <span className={`chart-swatch tone-${tones[i] ?? 'accent'}`} aria-hidden="true" />
            {s.name}
          </li>
        ))}
      </ul>
      <details>
        <summary>Show the numbers</summary>
        <TableFrame label={`${title}: the numbers`}>
            <thead>
              <tr>
                <th scope="col">{labelHeading}</th>
                {series.map((s) => (
                  <th scope="col" key={s.name}>
                    {s.name}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {labels.map((l, row) => (
                <tr key={`${l}-${row}`}>
                  <th scope="row">{l}</th>
                  {series.map((s) => (
                    <td key={s.name}>{value(s.values[row] ?? null)}</td>
                  ))}
                </tr>
              ))}
            </tbody>
        </TableFrame>
      </details>
    </figure>
  );
}
