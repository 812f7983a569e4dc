/**
 * Modes of everything the service writes under its data directory (D21): directories it creates are
 * `0700` and files `0600`, whatever the process's umask, so that the database, content and signing key
 * are readable by the service's own user only. Directories that already exist keep their mode: an
 * operator who chose one has a reason.
 */
export const PRIVATE_DIRECTORY_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;
