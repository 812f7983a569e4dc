import type { ComponentChildren } from 'preact';
import { navigate } from '../router';

/** A link to a page of the console, followed without loading the page again. */
export function Link(props: {
  href: string;
  children: ComponentChildren;
  current?: boolean;
  class?: string;
}) {
  return (
    <a
      href={props.href}
      class={props.class}
      aria-current={props.current ? 'page' : undefined}
      onClick={(event) => {
        // A new tab or window, or a download, is the browser's to make.
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(props.href);
      }}
    >
      {props.children}
    </a>
  );
}
