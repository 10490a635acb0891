/* Shared pieces of the qforge command: option parsing helpers, error
 * reporting, and the subcommand entry points. Only tools/ prints. */
#ifndef QFORGE_CLI_H
#define QFORGE_CLI_H

#include <stdbool.h>
#include <qforge/qforge.h>

/* Exit codes (CLI.md): 0 success, 1 failure, 2 bad usage. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Prints "qforge: <message>" for the last library failure and returns 1 (or 2 for usage). */
int cli_fail(qf_status st);
/* Prints "qforge CMD: <formatted message>" and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses a positive int option value; false with a message on failure. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);

extern bool cli_quiet;

int cmd_info(int argc, char **argv);

#endif
