import fs from 'node:fs';
import path from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

/**
 * The deployment examples of deploy/ (Compose and Kubernetes), read as their tools read them: what the
 * image's tests run is taken from them, so that the examples say what was run.
 */

const DEPLOY = path.resolve(import.meta.dirname, '../../deploy');

/** A Compose service's Playbook parts, after the file's merge keys are applied. */
export interface ComposeService {
  readonly command: string[];
  readonly environment: Record<string, string>;
  readonly volumes?: string[];
  readonly user: string;
  readonly read_only: boolean;
  readonly tmpfs: string[];
  readonly stop_signal?: string;
  readonly stop_grace_period?: string;
}

export function composeService(file: string, name: string): ComposeService {
  const document = parse(fs.readFileSync(path.join(DEPLOY, file), 'utf8'), { merge: true }) as {
    services: Record<string, ComposeService>;
  };
  const service = document.services[name];
  if (!service) throw new Error(`deploy/${file} has no service ${name}`);
  return service;
}

interface EnvVar {
  readonly name: string;
  readonly value?: string;
  readonly valueFrom?: unknown;
}

interface Probe {
  readonly httpGet: { readonly path: string; readonly port: string | number };
}

export interface KubernetesContainer {
  readonly name: string;
  readonly image: string;
  readonly args: string[];
  readonly env: EnvVar[];
  readonly ports?: { readonly name: string; readonly containerPort: number }[];
  readonly readinessProbe?: Probe;
  readonly livenessProbe?: Probe;
  readonly startupProbe?: Probe;
  readonly securityContext: { readonly readOnlyRootFilesystem: boolean };
  readonly volumeMounts: { readonly name: string; readonly mountPath: string }[];
}

export interface KubernetesPod {
  readonly terminationGracePeriodSeconds?: number;
  readonly securityContext: {
    readonly runAsNonRoot: boolean;
    readonly runAsUser: number;
    readonly runAsGroup: number;
  };
  readonly containers: KubernetesContainer[];
  readonly volumes: { readonly name: string; readonly emptyDir?: object }[];
}

interface KubernetesObject {
  readonly kind: string;
  readonly metadata: { readonly name: string };
  readonly spec: { readonly template?: { readonly spec: KubernetesPod } } & Record<string, unknown>;
}

/** Every object of a Kubernetes file (several documents, split by `---`). */
export function kubernetesObjects(file: string): KubernetesObject[] {
  return parseAllDocuments(fs.readFileSync(path.join(DEPLOY, 'kubernetes', file), 'utf8')).map(
    (document) => document.toJS() as KubernetesObject,
  );
}

/** The pod of the workload of `kind` (a Deployment, a Job) in a Kubernetes file. */
export function kubernetesPod(file: string, kind: 'Deployment' | 'Job'): KubernetesPod {
  const workload = kubernetesObjects(file).find((object) => object.kind === kind);
  const pod = workload?.spec.template?.spec;
  if (!pod) throw new Error(`deploy/kubernetes/${file} has no ${kind}`);
  return pod;
}

/** The names a container's environment sets, in the file's order. */
export function envNames(container: KubernetesContainer): string[] {
  return container.env.map((variable) => variable.name);
}

/** A plain value the file gives a variable (not one from a Secret). */
export function envValue(container: KubernetesContainer, name: string): string | undefined {
  return container.env.find((variable) => variable.name === name)?.value;
}
