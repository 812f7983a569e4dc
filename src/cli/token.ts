import type { Command } from 'commander';
import type { CliContext } from './context.js';

// Placeholder until the command lands.
export function registerTokenCommand(_program: Command, _context: CliContext): void {}
