import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createServices } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';

describe('readiness checks of the composition root (D18)', () => {
  const logger = pino({ level: 'silent' });

  it('checks the read replica too when reads go to one', async () => {
    // Ports nothing listens on: the checks must fail, not hang. Connections open lazily, so composing
    // the services touches neither database.
    const services = createServices(
      loadConfig({
        PLAYBOOK_DATABASE_URL: 'postgres://playbook@127.0.0.1:9/primary',
        PLAYBOOK_DATABASE_READ_URL: 'postgres://playbook@127.0.0.1:9/replica',
        PLAYBOOK_CONTENT_STORE: '/tmp/playbook-readiness-test',
      }),
      logger,
    );
    try {
      const replica = services.readiness.find((check) => check.name === 'readReplica');
      expect(services.readiness.map((check) => check.name)).toEqual([
        'database',
        'contentStore',
        'readReplica',
      ]);
      expect(replica?.optional).toBeFalsy();
      await expect(replica!.check()).rejects.toThrow();
    } finally {
      await services.close();
    }
  });

  it('has no replica check when reads go to the primary', async () => {
    const services = createServices(loadConfig({ PLAYBOOK_DATABASE_URL: 'sqlite::memory:' }), logger);
    try {
      expect(services.readiness.map((check) => check.name)).toEqual(['database', 'contentStore']);
    } finally {
      await services.close();
    }
  });
});
