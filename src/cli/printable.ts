import { CONTROLS } from '../schemas/common.js';

/** What a terminal acts upon: the characters D21 keeps out of single-line text. */
const UNPRINTABLE = new RegExp(`[${CONTROLS}]`, 'g');

/**
 * Text from storage as the command line prints it (D21): every control character and direction
 * override escaped as `\uXXXX`, so that no stored text can move an operator's cursor, change colours
 * or reverse what is shown.
 *
 * @example
 * printable('a\u001b[2Jb'); // 'a\\u001b[2Jb'
 */
export function printable(text: string): string {
  return text.replace(
    UNPRINTABLE,
    (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * A value as one line of JSON that a terminal shows as it is: compact (no line breaks or tabs of its
 * own), with the characters `printable` escapes written as JSON escapes, which read back as the same
 * text. For `--json` output, which is parsed by scripts and read by people alike.
 *
 * @example
 * printableJson({ name: 'a\u202eb' }); // '{"name":"a\\u202eb"}'
 */
export function printableJson(value: unknown): string {
  return printable(JSON.stringify(value));
}
