/*
 * The dtype table: each element type once, with its canonical name (the one
 * the manifest hash and messages use), its size and the spellings accepted
 * for it (ours and torch's), so that "bfloat16" and "bf16" mean one thing.
 */
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "util/convert.h"

#define DTYPE_ALIASES 4

static const struct {
    const char *name;
    size_t size;
    const char *alias[DTYPE_ALIASES];
} dtypes[] = {
    {"bf16", 2, {"bfloat16"}},
    {"f16", 2, {"float16", "fp16", "half"}},
    {"f32", 4, {"float32", "fp32", "float"}},
    {"f64", 8, {"float64", "fp64", "double"}},
    {"fp8_e4m3", 1, {"float8_e4m3fn", "float8_e4m3"}},
    {"fp8_e5m2", 1, {"float8_e5m2"}},
    {"i8", 1, {"int8"}},
    {"u8", 1, {"uint8"}},
    {"i16", 2, {"int16"}},
    {"i32", 4, {"int32"}},
    {"i64", 8, {"int64"}},
    {"bool", 1, {"boolean"}},
};

#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

int plan_dtype_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < NDTYPES; i++) {
        if (strcmp(name, dtypes[i].name) == 0)
            return i;
        for (int a = 0; a < DTYPE_ALIASES && dtypes[i].alias[a]; a++)
            if (strcmp(name, dtypes[i].alias[a]) == 0)
                return i;
    }
    return -1;
}

const char *plan_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < NDTYPES ? dtypes[dtype].name : "(unknown)";
}

size_t plan_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < NDTYPES ? dtypes[dtype].size : 0;
}

void plan_dtype_list(char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < NDTYPES && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                         dtypes[i].name);

        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int plan_dtype_conv(int from, int to)
{
    if (from == to)
        return CONV_NONE;
    if (from == plan_dtype_parse("f32") && to == plan_dtype_parse("bf16"))
        return CONV_F32_BF16;
    if (from == plan_dtype_parse("bf16") && to == plan_dtype_parse("f32"))
        return CONV_BF16_F32;
    if (from == plan_dtype_parse("f32") && to == plan_dtype_parse("fp8_e4m3"))
        return CONV_F32_E4M3;
    if (from == plan_dtype_parse("bf16") &&
        to == plan_dtype_parse("fp8_e4m3"))
        return CONV_BF16_E4M3;
    return -1;
}
