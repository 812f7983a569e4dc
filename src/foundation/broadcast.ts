/**
 * Short messages to every process of a deployment that listens: revoked key ids (D8), data
 * positions of the change log (the read path's answers from memory follow it). Users know only this interface: the in-process
 * broadcast below serves one process; one over Redis pub/sub (`PLAYBOOK_REDIS_URL`) serves several
 * instances without any change to them.
 *
 * Delivery may be lost (a reconnecting subscriber), so no listener may depend on it alone: each also
 * re-reads storage within a bound of its own (a second), and a message only makes that immediate.
 */
export interface Broadcast {
  /** Announces `message` (to this process at once, then to the others). */
  publish(message: string): Promise<void>;
  /** Calls `listener` for every message announced from now on; returns the way to stop. */
  subscribe(listener: (message: string) => void): () => void;
  close(): Promise<void>;
}

/** Messages of this process, delivered synchronously to its own listeners. */
export class InProcessBroadcast implements Broadcast {
  private readonly listeners = new Set<(message: string) => void>();

  async publish(message: string): Promise<void> {
    for (const listener of this.listeners) listener(message);
  }

  subscribe(listener: (message: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.listeners.clear();
  }
}
