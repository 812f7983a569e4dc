interface PageShape<T> {
  readonly data: readonly T[];
  readonly meta: { readonly page: number; readonly pageCount: number };
}

/** Every item of every page, fetched one page at a time as the loop asks for them. */
export async function* everyItem<T>(
  fetchPage: (page: number) => Promise<PageShape<T>>,
  firstPage = 1,
): AsyncGenerator<T, void, undefined> {
  for (let page = firstPage; ; page++) {
    const answer = await fetchPage(page);
    yield* answer.data;
    if (answer.meta.page >= answer.meta.pageCount || answer.data.length === 0) return;
  }
}
