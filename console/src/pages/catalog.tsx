import { useState } from 'preact/hooks';
import { when } from '../components/format';
import { PageTitle } from '../components/layout';
import { Link } from '../components/link';
import { Show, useLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { paths } from '../router';
import type { SignedIn } from '../session';

/** A Catalog and its Resources (D33). */
export function CatalogPage(props: { session: SignedIn; owner: 'svc' | 'org'; slug: string }) {
  const { client } = props.session;
  const { owner, slug } = props;
  const [page, setPage] = useState(1);
  const catalog = useLoad(() => client.catalogs.get(owner, slug), [client, owner, slug]);
  const resources = useLoad(
    () => client.resources.list(owner, slug, { page, pageSize: 20 }),
    [client, owner, slug, page],
  );
  const name = catalog.loaded.state === 'ready' ? catalog.loaded.data.name : `${owner}/${slug}`;
  return (
    <>
      <p class="crumbs">
        <Link href={paths.catalogs()}>Catalogs</Link> / <code>{`${owner}/${slug}`}</code>
      </p>
      <PageTitle>{name}</PageTitle>
      <Show loaded={catalog.loaded} what="the Catalog">
        {(found) => (
          <dl class="facts">
            <dt>Ref</dt>
            <dd>
              <code>{found.humanRef}</code>
            </dd>
            <dt>Status</dt>
            <dd>{found.status}</dd>
            <dt>Version</dt>
            <dd>{found.currentVersion?.version ?? '—'}</dd>
            {found.description && (
              <>
                <dt>Description</dt>
                <dd>{found.description}</dd>
              </>
            )}
          </dl>
        )}
      </Show>
      <h2>Resources</h2>
      <PagedTable
        loaded={resources.loaded}
        what="Resources"
        empty="This Catalog has no Resources."
        caption={`Resources of ${name}`}
        columns={['Title', 'Slug', 'Kind', 'Status', 'Version', 'Updated']}
        onPage={setPage}
        row={(resource) => ({
          key: resource.id,
          name: <Link href={paths.resource(resource.id)}>{resource.title}</Link>,
          cells: (
            <>
              <td>
                <code>{resource.slug}</code>
              </td>
              <td>{resource.kind}</td>
              <td>{resource.status}</td>
              <td>{resource.currentVersion?.version ?? '—'}</td>
              <td>{when(resource.updatedAt)}</td>
            </>
          ),
        })}
      />
    </>
  );
}
