/*
 * Memory registration and remote keys, following the profile's decisions
 * (profile.c): our own unique keys or the provider's, endpoint binding,
 * descriptors, raw keys mapped on import.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "fabric/fabric_int.h"

fx_status_t mr_reg_access(struct fab *f, void *base, size_t len,
                          uint64_t access, struct fab_mr *out)
{
    uint64_t requested = f->prof.prov_key ? 0 : f->next_key++;
    struct fid_mr *mr = NULL;
    fx_status_t st;
    int ret;

    memset(out, 0, sizeof(*out));
    ret = fi_mr_reg(f->domain, base, len, access, 0, requested, 0, &mr, NULL);
    if (ret != 0)
        return err_set(FX_ERR_REGISTER,
                       "fi_mr_reg(addr=%p, len=%zu) failed on %s: %s", base,
                       len, f->prof.prov, fi_strerror(-ret));
    if (f->prof.ep_bind) {
        ret = fi_mr_bind(mr, &f->ep->fid, 0);
        if (ret == 0)
            ret = fi_mr_enable(mr);
        if (ret != 0) {
            st = err_set(FX_ERR_REGISTER,
                         "binding MR (addr=%p, len=%zu) to the endpoint "
                         "failed on %s: %s", base, len, f->prof.prov,
                         fi_strerror(-ret));
            goto undo_reg;
        }
    }
    if (f->prof.raw_key) {
        uint64_t raw_base = 0;
        size_t key_len = sizeof(out->key_bytes);

        ret = fi_mr_raw_attr(mr, &raw_base, out->key_bytes, &key_len, 0);
        if (ret != 0) {
            st = err_set(FX_ERR_REGISTER, "fi_mr_raw_attr failed on %s: %s",
                         f->prof.prov, fi_strerror(-ret));
            goto undo_reg;
        }
        out->key_len = key_len;
    } else {
        out->key = fi_mr_key(mr);
        if (out->key == FI_KEY_NOTAVAIL) {
            st = err_set(FX_ERR_REGISTER, "%s gave no key for MR "
                         "(addr=%p, len=%zu)", f->prof.prov, base, len);
            goto undo_reg;
        }
        memcpy(out->key_bytes, &out->key, sizeof(out->key));
        out->key_len = sizeof(out->key);
    }
    out->mr = mr;
    out->desc = fi_mr_desc(mr);
    out->base = base;
    out->len = len;
    return FX_OK;
undo_reg:
    fi_close(&mr->fid);
    return st;
}

fx_status_t fab_mr_reg(struct fab *f, void *base, size_t len, int remote_write,
                       struct fab_mr *out)
{
    /* Never FI_REMOTE_READ: peers may write weights in, not read them out. */
    return mr_reg_access(f, base, len,
                         FI_WRITE | (remote_write ? FI_REMOTE_WRITE : 0), out);
}

void fab_mr_dereg(struct fab *f, struct fab_mr *mr)
{
    (void)f;
    if (mr->mr != NULL)
        fi_close(&mr->mr->fid);
    mr->mr = NULL;
}

fx_status_t fab_rkey_import(struct fab *f, const uint8_t *key_bytes,
                            size_t key_len, uint64_t base, uint64_t len,
                            struct fab_rkey *out)
{
    int ret;

    memset(out, 0, sizeof(*out));
    out->base = f->prof.virt_addr ? base : 0;
    out->len = len;
    if (f->prof.raw_key) {
        ret = fi_mr_map_raw(f->domain, base, (uint8_t *)key_bytes, key_len,
                            &out->key, 0);
        if (ret != 0)
            return err_set(FX_ERR_BLOB, "fi_mr_map_raw of a %zu-byte key "
                           "failed on %s: %s", key_len, f->prof.prov,
                           fi_strerror(-ret));
        out->mapped = 1;
        return FX_OK;
    }
    if (key_len != sizeof(uint64_t))
        return err_set(FX_ERR_BLOB, "a %zu-byte key where %s uses 8",
                       key_len, f->prof.prov);
    memcpy(&out->key, key_bytes, sizeof(out->key));
    return FX_OK;
}

void fab_rkey_release(struct fab *f, struct fab_rkey *rk)
{
    if (rk->mapped)
        fi_mr_unmap_key(f->domain, rk->key);
    rk->mapped = 0;
}
