import { useState } from 'preact/hooks';
import { when } from '../components/format';
import { PageTitle } from '../components/layout';
import { Link } from '../components/link';
import { useLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { paths } from '../router';
import type { SignedIn } from '../session';

/** D33's Catalogs page: the Catalogs the account sees, the service's and its own. */
export function CatalogsPage(props: { session: SignedIn }) {
  const { client } = props.session;
  const [page, setPage] = useState(1);
  const { loaded } = useLoad(() => client.catalogs.list({ page, pageSize: 20 }), [client, page]);
  return (
    <>
      <PageTitle>Catalogs</PageTitle>
      <PagedTable
        loaded={loaded}
        what="Catalogs"
        empty="No Catalogs are visible to this account yet."
        caption="Catalogs this account can read"
        columns={['Name', 'Ref', 'Status', 'Version', 'Resources', 'Updated']}
        onPage={setPage}
        row={(catalog) => ({
          key: catalog.id,
          name: <Link href={paths.catalog(catalog.owner, catalog.slug)}>{catalog.name}</Link>,
          cells: (
            <>
              <td>
                <code>{catalog.humanRef}</code>
              </td>
              <td>{catalog.status}</td>
              <td>{catalog.currentVersion?.version ?? '—'}</td>
              <td>{catalog.currentVersion?.resourceCount ?? 0}</td>
              <td>{when(catalog.updatedAt)}</td>
            </>
          ),
        })}
      />
    </>
  );
}
