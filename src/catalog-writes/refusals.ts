/**
 * A change the planner refuses, said without knowing where the values came from: `origin` is what the
 * door named the Catalog or Resource by (a file of an import tree, `resources[3]` of a request body,
 * or '' for the body itself), `field` the field at fault.
 */
export interface PlanRefusal {
  readonly origin: string;
  readonly field: 'version';
  readonly message: string;
}

/** How `playbook import` says a refusal: the file, the field, what is wrong. */
export function refusalLine(refusal: PlanRefusal): string {
  return `${refusal.origin}: ${refusal.field}: ${refusal.message}`;
}

/**
 * An import that cannot proceed: invalid files, or changes that would rewrite an immutable version
 * label (D15). Nothing has been written when it is thrown. Each problem is one line that names the
 * file, relative to the tree, and the field.
 *
 * @example
 * try {
 *   await importTree(deps, { dir: 'content', owner: { kind: 'svc' } });
 * } catch (error) {
 *   if (error instanceof ImportValidationError) for (const line of error.problems) console.error(line);
 * }
 */
export class ImportValidationError extends Error {
  override name = 'ImportValidationError';

  constructor(
    readonly problems: readonly string[],
    /** `immutable`: the files are valid, but would rewrite a version label (D15; 409 over HTTP, D23). */
    readonly kind: 'invalid' | 'immutable' = 'invalid',
    /** For `immutable`: the planner's refusals, for a door that says them otherwise than as lines. */
    readonly refusals: readonly PlanRefusal[] = [],
  ) {
    super(`import refused: ${problems.length} ${problems.length === 1 ? 'problem' : 'problems'}`);
  }
}
