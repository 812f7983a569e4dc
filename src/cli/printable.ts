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
