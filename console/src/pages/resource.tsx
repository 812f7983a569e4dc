import type { Resource, ResourceVersion } from '@playbook/client';
import { useState } from 'preact/hooks';
import { bytes, when } from '../components/format';
import { PageTitle } from '../components/layout';
import { Link } from '../components/link';
import { Show, useLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { paths } from '../router';
import type { SignedIn } from '../session';

/** Media types shown as text; anything else is offered for download, never rendered. */
function isText(mediaType: string): boolean {
  const type = mediaType.split(';')[0]!.trim().toLowerCase();
  return (
    type.startsWith('text/') ||
    /^application\/(json|yaml|x-yaml|xml|toml|javascript|ecmascript)$/.test(type) ||
    /\+(json|xml|yaml)$/.test(type)
  );
}

/**
 * A version's content (D33): text shown as text, in a `<pre>`, so that markup in it is characters and
 * links in it are not followed; other media offered for download, as the bytes they are.
 */
function Content(props: { version: ResourceVersion; name: string }) {
  const { version } = props;
  if (isText(version.mediaType)) {
    return <pre class="content">{version.content}</pre>;
  }
  const download = () => {
    const url = URL.createObjectURL(new Blob([version.content], { type: version.mediaType }));
    const link = document.createElement('a');
    link.href = url;
    link.download = `${props.name}-${version.version}`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  };
  return (
    <p>
      Content of type <code>{version.mediaType}</code>, {bytes(version.contentSizeBytes)}.{' '}
      <button type="button" onClick={download}>
        Download
      </button>
    </p>
  );
}

function VersionDetail(props: { version: ResourceVersion; resource: Resource }) {
  const { version } = props;
  return (
    <section aria-labelledby="content-heading">
      <h2 id="content-heading">Version {version.version}</h2>
      <dl class="facts">
        <dt>Status</dt>
        <dd>{version.status}</dd>
        <dt>Published</dt>
        <dd>{when(version.publishedAt)}</dd>
        <dt>Media type</dt>
        <dd>
          <code>{version.mediaType}</code>
        </dd>
        <dt>Size</dt>
        <dd>{bytes(version.contentSizeBytes)}</dd>
      </dl>
      <Content version={version} name={props.resource.slug} />
    </section>
  );
}

/** A Resource: its versions, and the content of the current one or of the version chosen (D33). */
export function ResourcePage(props: {
  session: SignedIn;
  resourceId: string;
  versionId: string | undefined;
}) {
  const { client } = props.session;
  const { resourceId, versionId } = props;
  const [page, setPage] = useState(1);
  const resource = useLoad(() => client.resources.get(resourceId), [client, resourceId]);
  const chosen = useLoad(
    () => (versionId === undefined ? Promise.resolve(undefined) : client.versions.get(resourceId, versionId)),
    [client, resourceId, versionId],
  );
  const versions = useLoad(
    () => client.resources.versions(resourceId, { page, pageSize: 10 }),
    [client, resourceId, page],
  );
  const found = resource.loaded.state === 'ready' ? resource.loaded.data : undefined;
  return (
    <>
      <p class="crumbs">
        <Link href={paths.catalogs()}>Catalogs</Link>
        {found && (
          <>
            {' / '}
            <Link
              href={paths.catalog(found.catalogHumanRef.split('/')[0]!, found.catalogHumanRef.split('/')[1]!)}
            >
              {found.catalogHumanRef}
            </Link>
          </>
        )}
      </p>
      <PageTitle>{found ? found.title : 'Resource'}</PageTitle>
      <Show loaded={resource.loaded} what="the Resource">
        {(detail) => (
          <>
            <dl class="facts">
              <dt>Ref</dt>
              <dd>
                <code>{detail.humanRef}</code>
              </dd>
              <dt>Kind</dt>
              <dd>{detail.kind}</dd>
              <dt>Status</dt>
              <dd>{detail.status}</dd>
              {detail.description && (
                <>
                  <dt>Description</dt>
                  <dd>{detail.description}</dd>
                </>
              )}
            </dl>
            <h2>Versions</h2>
            <PagedTable
              loaded={versions.loaded}
              what="versions"
              empty="This Resource has no version you can see."
              caption={`Versions of ${detail.title}, newest first`}
              columns={['Version', 'Status', 'Published', 'Media type', 'Size']}
              onPage={setPage}
              row={(version) => ({
                key: version.id,
                name: (
                  <Link
                    href={paths.version(detail.id, version.id)}
                    current={version.id === (versionId ?? detail.currentVersion.id)}
                  >
                    {version.version}
                  </Link>
                ),
                cells: (
                  <>
                    <td>{version.status}</td>
                    <td>{when(version.publishedAt)}</td>
                    <td>
                      <code>{version.mediaType}</code>
                    </td>
                    <td>{bytes(version.contentSizeBytes)}</td>
                  </>
                ),
              })}
            />
            {versionId === undefined ? (
              <VersionDetail version={detail.currentVersion as ResourceVersion} resource={detail} />
            ) : (
              <Show loaded={chosen.loaded} what="the version">
                {(version) => version && <VersionDetail version={version} resource={detail} />}
              </Show>
            )}
          </>
        )}
      </Show>
    </>
  );
}
