/* Status names, the thread-local error detail and escaping of inputs
 * quoted in it (see error.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

static __thread char err_buf[ERR_MSG_MAX];

const char *fx_strerror(fx_status_t status)
{
    switch (status) {
#define FX_STATUS_CASE_(name, value, text) case name: return text;
        FX_STATUS_LIST(FX_STATUS_CASE_)
#undef FX_STATUS_CASE_
    }
    return "unknown fabxfer status";
}

fx_status_t err_set(fx_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
    return status;
}

fx_status_t err_prefix(fx_status_t status, const char *fmt, ...)
{
    char head[ERR_MSG_MAX], joined[2 * ERR_MSG_MAX + 4];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    snprintf(joined, sizeof(joined), "%s: %s", head,
             err_buf[0] != '\0' ? err_buf : fx_strerror(status));
    memcpy(err_buf, joined, sizeof(err_buf) - 1);
    err_buf[sizeof(err_buf) - 1] = '\0';
    return status;
}

const char *err_last(void)
{
    return err_buf;
}

void err_clear(void)
{
    err_buf[0] = '\0';
}

/* Length of the UTF-8 sequence at p (at most n bytes), or 0 where it is not
 * one or encodes a C1 control (U+0080 to U+009F), which terminals obey. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t want;

    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        want = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        want = 3;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        want = 4;
    else
        return 0;
    if (n < want)
        return 0;
    for (size_t i = 1; i < want; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if (p[0] == 0xc2 && p[1] < 0xa0)
        return 0;
    /* Overlong forms and surrogates hide what they encode. */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return want;
}

/* The escaped form of the input's next character into one (8 bytes); its
 * length there, and in *eaten how many input bytes it stands for. */
static size_t escape_one(const unsigned char *p, size_t left, char *one,
                         size_t *eaten)
{
    static const char hex[] = "0123456789abcdef";
    static const char plain[] = "\\\"\n\r\t", named[] = "\\\"nrt";
    const char *at = p[0] != '\0' ? strchr(plain, p[0]) : NULL;
    size_t u;

    *eaten = 1;
    if (at != NULL) {
        one[0] = '\\';
        one[1] = named[at - plain];
        return 2;
    }
    if (p[0] >= 0x20 && p[0] < 0x7f) {
        one[0] = (char)p[0];
        return 1;
    }
    if (p[0] >= 0x80 && (u = utf8_len(p, left)) > 0) {
        memcpy(one, p, u);
        *eaten = u;
        return u;
    }
    one[0] = '\\';
    one[1] = 'x';
    one[2] = hex[p[0] >> 4];
    one[3] = hex[p[0] & 0xf];
    return 4;
}

const char *err_escape(char *buf, size_t size, const void *s, size_t len)
{
    const unsigned char *p = s;
    size_t used = 0, cut = 0, i = 0;

    if (buf == NULL || size < 8)
        return "";
    if (s == NULL) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    while (i < len) {
        char one[8];
        size_t eaten, n = escape_one(p + i, len - i, one, &eaten);

        if (used + n + 1 > size) {
            memcpy(buf + cut, "...", 4); /* the last place "..." fits */
            return buf;
        }
        memcpy(buf + used, one, n);
        used += n;
        i += eaten;
        if (used + 4 <= size)
            cut = used;
    }
    buf[used] = '\0';
    return buf;
}

const char *err_esc(char *buf, const char *s)
{
    return err_escape(buf, ERR_ESC_MAX, s, s != NULL ? strlen(s) : 0);
}
