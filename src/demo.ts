import type { FastifyBaseLogger } from 'fastify';
import type { Services } from './services.js';

// Placeholder until import lands.
export async function importDemoContentIfEmpty(
  _services: Services,
  _logger: FastifyBaseLogger,
): Promise<void> {}
