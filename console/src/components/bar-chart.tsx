/** One bar of a chart: its label, and counts of each series. */
export interface Bar {
  readonly label: string;
  /** Written under the bar when given (every few bars, so that the labels do not crowd). */
  readonly axisLabel?: string;
  readonly values: readonly number[];
}

export interface Series {
  readonly name: string;
  /** A class of the stylesheet, which gives the colour. */
  readonly class: string;
}

const WIDTH = 640;
const HEIGHT = 120;
/** Room under the bars for their labels. */
const AXIS = 18;
const GAP = 4;

/**
 * A stacked bar chart drawn in SVG, as one image whose text alternative says what it shows; the list
 * it summarises is on the same page, for those who read rather than look.
 */
export function BarChart(props: {
  title: string;
  summary: string;
  bars: readonly Bar[];
  series: readonly Series[];
}) {
  const max = Math.max(1, ...props.bars.map((bar) => bar.values.reduce((sum, value) => sum + value, 0)));
  const width = props.bars.length === 0 ? 0 : (WIDTH - GAP * props.bars.length) / props.bars.length;
  return (
    <figure class="chart">
      <figcaption>
        {props.title}: {props.summary}
      </figcaption>
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT + AXIS}`}
        role="img"
        aria-label={`${props.title}: ${props.summary}`}
      >
        {props.bars.map((bar, index) => {
          let top = HEIGHT;
          return (
            <g key={bar.label}>
              {bar.values.map((value, which) => {
                const height = (value / max) * (HEIGHT - 4);
                top -= height;
                return (
                  <rect
                    key={props.series[which]?.name}
                    class={props.series[which]?.class}
                    x={index * (width + GAP)}
                    y={top}
                    width={width}
                    height={height}
                  />
                );
              })}
              {bar.axisLabel && (
                <text
                  class="axis"
                  // The last label ends where its bar ends, inside the chart.
                  {...(index === props.bars.length - 1
                    ? { x: index * (width + GAP) + width, 'text-anchor': 'end' }
                    : { x: index * (width + GAP) })}
                  y={HEIGHT + AXIS - 4}
                >
                  {bar.axisLabel}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <ul class="legend">
        {props.series.map((series) => (
          <li key={series.name}>
            <span class={`swatch ${series.class}`} aria-hidden="true" /> {series.name}
          </li>
        ))}
      </ul>
    </figure>
  );
}
