import type { Command } from 'commander';
import type { CliContext } from './context.js';

// Placeholder until the command lands.
export function registerImportCommand(_program: Command, _context: CliContext): void {}
