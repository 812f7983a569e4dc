#!/usr/bin/env node
import { main } from './program.js';

const exitCode = await main(process.argv, process.env);
// `serve` keeps the event loop alive until it is told to stop; other commands end when their work does.
if (exitCode !== 0) process.exit(exitCode);
