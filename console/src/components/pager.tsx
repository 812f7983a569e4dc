/** A list's paging (D3): where the page is, and the way to the pages around it. */
export function Pager(props: {
  meta: { page: number; pageCount: number; total: number };
  label: string;
  onPage: (page: number) => void;
}) {
  const { page, pageCount, total } = props.meta;
  if (pageCount <= 1) return null;
  return (
    <nav class="pager" aria-label={`Pages of ${props.label}`}>
      <button type="button" disabled={page <= 1} onClick={() => props.onPage(page - 1)}>
        Previous page
      </button>
      <span>
        Page {page} of {pageCount} ({total} in all)
      </span>
      <button type="button" disabled={page >= pageCount} onClick={() => props.onPage(page + 1)}>
        Next page
      </button>
    </nav>
  );
}
