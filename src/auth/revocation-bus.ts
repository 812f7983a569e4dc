/**
 * Tells every verifier that a key was revoked, so that it drops its cached copy at once. The verifier
 * knows only this interface: the in-process bus below serves one process; a bus over Redis pub/sub
 * (D10, `PLAYBOOK_REDIS_URL`) serves several instances without any change to the verifier.
 *
 * Delivery may be lost (a reconnecting subscriber); the verifier's one-second revalidation against
 * storage is what guarantees refusal within a second, the bus only makes it immediate.
 */
export interface RevocationBus {
  /** Announces a revocation that storage already records. */
  publish(keyId: string): Promise<void>;
  /** Calls `listener` for every revocation announced from now on; returns the way to stop. */
  subscribe(listener: (keyId: string) => void): () => void;
  close(): Promise<void>;
}

/** Revocations made in this process, delivered synchronously to its own verifiers. */
export class InProcessRevocationBus implements RevocationBus {
  private readonly listeners = new Set<(keyId: string) => void>();

  async publish(keyId: string): Promise<void> {
    for (const listener of this.listeners) listener(keyId);
  }

  subscribe(listener: (keyId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.listeners.clear();
  }
}
