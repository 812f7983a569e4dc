import type { ComponentChildren } from 'preact';
import { Empty, type Loaded, Show } from './load';
import { Pager } from './pager';

/** One page of a list, as every list of the API answers (D3). */
export interface Page<T> {
  readonly data: readonly T[];
  readonly meta: { readonly page: number; readonly pageCount: number; readonly total: number };
}

/** A row: its key, its name cell (a row header, which names the row), and its other cells. */
export interface Row {
  readonly key: string;
  readonly name: ComponentChildren;
  readonly cells: ComponentChildren;
}

/**
 * One page of a list as a table (D33): the loading, error and empty states, a caption, column headers,
 * each row named by its name cell (`aria-labelledby`, so that "the row of key ci" finds it), and the
 * way to the other pages. Undefined data (a page that needs an account) shows as empty.
 */
export function PagedTable<T>(props: {
  loaded: Loaded<Page<T> | undefined>;
  what: string;
  empty: ComponentChildren;
  caption: ComponentChildren;
  columns: readonly string[];
  row: (item: T) => Row;
  onPage: (page: number) => void;
  /** What goes above the table once there are rows (a chart of them). */
  above?: (page: Page<T>) => ComponentChildren;
}) {
  return (
    <Show loaded={props.loaded} what={props.what}>
      {(list) =>
        !list || list.data.length === 0 ? (
          <Empty>{props.empty}</Empty>
        ) : (
          <>
            {props.above?.(list)}
            <div class="table-wrap">
              <table>
                <caption>{props.caption}</caption>
                <thead>
                  <tr>
                    {props.columns.map((column) => (
                      <th scope="col" key={column}>
                        {column}
                      </th>
                    ))}
                  </tr>
                </thead>
                <tbody>
                  {list.data.map((item) => {
                    const row = props.row(item);
                    const id = `row-${row.key}`;
                    return (
                      <tr key={row.key} aria-labelledby={id}>
                        <th scope="row" id={id}>
                          {row.name}
                        </th>
                        {row.cells}
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            </div>
            <Pager meta={list.meta} label={props.what} onPage={props.onPage} />
          </>
        )
      }
    </Show>
  );
}
