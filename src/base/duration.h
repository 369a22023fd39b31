/* SPDX-License-Identifier: Apache-2.0 */
/* Durations on the command line: "500ms", "10s", "5m", "1h", or plain
 * seconds ("30").  Range-checked; no fractions. */
#ifndef GPUOP_BASE_DURATION_H
#define GPUOP_BASE_DURATION_H

#include <stdint.h>

#include "base/error.h"

/* Parse s into milliseconds (at most 7 days).  Errors name s and the forms
 * accepted; `what` names the option ("--interval"). */
int duration_parse(const char *s, const char *what, uint64_t *ms, struct gpuop_error *err);

#endif
