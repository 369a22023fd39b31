/* SPDX-License-Identifier: Apache-2.0 */
/* etc/support-matrix.json, compiled in (generated at build time by
 * src/validate/CMakeLists.txt into matrix_data.c). */
#ifndef GPUOP_VALIDATE_MATRIX_DATA_H
#define GPUOP_VALIDATE_MATRIX_DATA_H

#include <stddef.h>

extern const unsigned char gpuop_support_matrix_json[];
extern const size_t gpuop_support_matrix_json_len;

#endif
