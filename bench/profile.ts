/**
 * Reads what V8's sampling profiler wrote (`node --cpu-prof`): the entries of the main thread's profile
 * with the most self time over its last `lastMs`, each as its share of the time the thread was busy.
 */
import fs from 'node:fs';
import path from 'node:path';

interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  }[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** Where an entry comes from, shortly: a package's name, or a file of the service or of Node. */
function placeOf(url: string): string {
  const modules = url.lastIndexOf('node_modules/');
  if (modules !== -1) return url.slice(modules + 'node_modules/'.length);
  return url.replace(/^file:\/\/.*?\/dist\//, 'dist/');
}

export function topSelfTime(folder: string, lastMs: number, count: number): string[] {
  // The main thread's profile is the first written (worker threads write theirs later, numbered after).
  const [first] = fs
    .readdirSync(folder)
    .filter((name) => name.endsWith('.cpuprofile'))
    .sort();
  if (first === undefined) return ['(no profile was written)'];
  const profile = JSON.parse(fs.readFileSync(path.join(folder, first), 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const total = profile.timeDeltas.reduce((sum, delta) => sum + delta, 0);
  const from = total - lastMs * 1000;
  const self = new Map<string, number>();
  let elapsed = 0;
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const delta = profile.timeDeltas[i] ?? 0;
    elapsed += delta;
    if (elapsed < from) return;
    const frame = byId.get(id)?.callFrame;
    if (!frame) return;
    const name = `${frame.functionName || '(anonymous)'}${frame.url ? ` ${placeOf(frame.url)}:${frame.lineNumber + 1}` : ''}`;
    if (frame.functionName !== '(idle)') busy += delta;
    self.set(name, (self.get(name) ?? 0) + delta);
  });
  self.delete('(idle)');
  return [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([name, time]) => `${((100 * time) / busy).toFixed(1).padStart(5)} %  ${name}`);
}
