import { DEFAULT_PAGE_SIZE, type PageMeta } from '../schemas/common.js';

/** Pagination of every list (D3): a page number and size as asked, defaults filled in here. */
export interface PageRequest {
  readonly page?: number;
  readonly pageSize?: number;
}

/** The rows a page covers, as SQL's `offset` and `limit`. */
export interface PageWindow {
  readonly offset: number;
  readonly limit: number;
}

export function pageOf(request: PageRequest): { page: number; pageSize: number } {
  return { page: request.page ?? 1, pageSize: request.pageSize ?? DEFAULT_PAGE_SIZE };
}

/** Counts first (or knows the count), so that a page past the end costs no second query (D3). */
export async function readPage<R>(
  request: PageRequest,
  count: number | (() => Promise<number>),
  fetch: (window: PageWindow) => Promise<R[]>,
): Promise<{ rows: R[]; meta: PageMeta }> {
  const { page, pageSize } = pageOf(request);
  const total = typeof count === 'number' ? count : await count();
  const offset = (page - 1) * pageSize;
  const rows = offset < total ? await fetch({ offset, limit: pageSize }) : [];
  return { rows, meta: { page, pageSize, pageCount: Math.ceil(total / pageSize), total } };
}
