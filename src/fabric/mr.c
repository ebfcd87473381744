/*
 * Memory registration and remote keys, following the profile's decisions
 * (profile.c): our own unique keys or the provider's, endpoint binding,
 * descriptors, raw keys mapped on import. A region is registered once on
 * every rail's domain; peers learn one key per rail.
 */
#include <stdio.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

static fx_status_t reg_rail(struct fab *f, int r, void *base, size_t len,
                            uint64_t access, uint64_t requested, int cuda_dev,
                            uint64_t reg_flags, struct fab_mr_rail *out)
{
    struct fab_rail *rail = &f->rails[r];
    const struct fab_profile *prof = rail_prof(f, r);
    struct fid_mr *mr = NULL;
    fx_status_t st;
    int ret;

    if (cuda_dev < 0) {
        ret = fi_mr_reg(rail->domain, base, len, access, 0, requested, 0,
                        &mr, NULL);
    } else {
        struct iovec iov = {base, len};
        struct fi_mr_attr attr = {
            .mr_iov = &iov, .iov_count = 1, .access = access,
            .requested_key = requested, .iface = FI_HMEM_CUDA,
        };

        attr.device.cuda = cuda_dev;
        ret = fi_mr_regattr(rail->domain, &attr, reg_flags, &mr);
    }
    if (ret != 0)
        return err_set(fab_status(ret, FX_ERR_REGISTER),
                       "%s(addr=%p, len=%zu%s) failed on %s, domain %s: %s",
                       cuda_dev < 0 ? "fi_mr_reg" : "fi_mr_regattr", base,
                       len, cuda_dev < 0 ? "" : ", FI_HMEM_CUDA",
                       prof->prov, rail->name, fi_strerror(-ret));
    if (prof->ep_bind) {
        ret = fi_mr_bind(mr, &rail->ep->fid, 0);
        if (ret == 0)
            ret = fi_mr_enable(mr);
        if (ret != 0) {
            st = err_set(fab_status(ret, FX_ERR_REGISTER),
                         "binding MR (addr=%p, len=%zu) to the endpoint "
                         "failed on %s, domain %s: %s", base, len,
                         prof->prov, rail->name, fi_strerror(-ret));
            goto undo_reg;
        }
    }
    if (!(access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) {
        /* Memory only we touch needs no key, and libfabric 2.x gives none
         * (FI_KEY_NOTAVAIL from util's MR map on tcp and shm). */
        out->key = FI_KEY_NOTAVAIL;
        out->key_len = 0;
    } else if (prof->raw_key) {
        uint64_t raw_base = 0;
        size_t key_len = sizeof(out->key_bytes);

        ret = fi_mr_raw_attr(mr, &raw_base, out->key_bytes, &key_len, 0);
        if (ret != 0) {
            st = err_set(fab_status(ret, FX_ERR_REGISTER),
                         "fi_mr_raw_attr failed on %s: %s", prof->prov,
                         fi_strerror(-ret));
            goto undo_reg;
        }
        out->key_len = key_len;
    } else {
        out->key = fi_mr_key(mr);
        if (out->key == FI_KEY_NOTAVAIL) {
            st = err_set(FX_ERR_REGISTER, "%s gave no key for MR "
                         "(addr=%p, len=%zu)", prof->prov, base, len);
            goto undo_reg;
        }
        memcpy(out->key_bytes, &out->key, sizeof(out->key));
        out->key_len = sizeof(out->key);
    }
    out->mr = mr;
    out->base = base;
    out->desc = fi_mr_desc(mr);
    f->nmr++;
    return FX_OK;
undo_reg:
    fi_close(&mr->fid);
    return st;
}

/* On each rail: host memory (cuda_dev < 0); else, where the rail's path
 * has FI_HMEM, device memory base, where not, host memory host, or
 * nothing when host is NULL. */
static fx_status_t mr_reg_rails(struct fab *f, void *base, void *host,
                                size_t len, uint64_t access, int cuda_dev,
                                uint64_t reg_flags, struct fab_mr *out,
                                int *bad_path)
{
    /* Each rail is its own domain: one requested key serves them all. */
    uint64_t requested = f->next_key++;
    fx_status_t st;

    memset(out, 0, sizeof(*out));
    out->base = base;
    out->len = len;
    for (int r = 0; r < f->nrails; r++) {
        int dev = cuda_dev >= 0 && f->paths[f->rails[r].path].hmem;
        void *mem = cuda_dev < 0 || dev ? base : host;

        out->nrails = r + 1;
        if (mem == NULL) {
            out->rail[r].key = FI_KEY_NOTAVAIL;
            continue;
        }
        st = reg_rail(f, r, mem, len, access,
                      rail_prof(f, r)->prov_key ? 0 : requested,
                      dev ? cuda_dev : -1, dev ? reg_flags : 0,
                      &out->rail[r]);
        if (st != FX_OK) {
            if (bad_path != NULL)
                *bad_path = f->rails[r].path;
            fab_mr_dereg(f, out);
            return st;
        }
    }
    out->device = cuda_dev >= 0;
    return FX_OK;
}

fx_status_t mr_reg_access(struct fab *f, void *base, size_t len,
                          uint64_t access, struct fab_mr *out)
{
    return mr_reg_rails(f, base, NULL, len, access, -1, 0, out, NULL);
}

fx_status_t fab_mr_reg_cuda(struct fab *f, void *base, void *host,
                            size_t len, int cuda_dev, int remote_write,
                            int device_only, struct fab_mr *out,
                            int *bad_path)
{
    *bad_path = -1;
    if (!f->hmem)
        return err_set(FX_ERR_UNSUPPORTED, "CUDA memory at %p: %s", base,
                       f->hmem_why);
    /* FI_HMEM_DEVICE_ONLY lets a provider move the memory device to
     * device: libfabric 2.6's shm takes CUDA IPC only for such regions,
     * and copied everything else through host bounce buffers (a dense
     * Llama-3-8B layer at 0.41x the naive way on the H200). */
    return mr_reg_rails(f, base, host, len,
                        FI_WRITE | (remote_write ? FI_REMOTE_WRITE : 0),
                        cuda_dev, device_only ? FI_HMEM_DEVICE_ONLY : 0,
                        out, bad_path);
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
    for (int r = 0; r < mr->nrails; r++) {
        if (mr->rail[r].mr != NULL && fi_close(&mr->rail[r].mr->fid) == 0)
            f->nmr--;
        mr->rail[r].mr = NULL;
    }
    mr->nrails = 0;
}

uint64_t fab_mr_count(const struct fab *f)
{
    return f->nmr;
}

fx_status_t fab_rkey_import(struct fab *f, int path, const uint8_t *key_bytes,
                            size_t key_len, uint64_t base, uint64_t len,
                            struct fab_rkey *out)
{
    const struct fab_profile *prof;
    int ret, r0, r1;

    memset(out, 0, sizeof(*out));
    if (path < 0 || path >= f->npaths)
        return err_set(FX_ERR_INVALID, "fab_rkey_import: path %d of %d",
                       path, f->npaths);
    prof = &f->paths[path].prof;
    r0 = f->paths[path].rail0;
    r1 = r0 + f->paths[path].nrails;
    out->base = prof->virt_addr ? base : 0;
    out->len = len;
    if (!prof->raw_key && key_len != sizeof(uint64_t))
        return err_set(FX_ERR_BLOB, "a %zu-byte key where %s uses 8",
                       key_len, prof->prov);
    for (int r = r0; r < r1; r++, key_bytes += key_len) {
        if (!prof->raw_key) {
            memcpy(&out->key[r], key_bytes, sizeof(out->key[r]));
            continue;
        }
        ret = fi_mr_map_raw(f->rails[r].domain, base, (uint8_t *)key_bytes,
                            key_len, &out->key[r], 0);
        if (ret != 0) {
            fab_rkey_release(f, out);
            return err_set(fab_status(ret, FX_ERR_BLOB), "fi_mr_map_raw of "
                           "a %zu-byte key failed on %s: %s", key_len,
                           prof->prov, fi_strerror(-ret));
        }
        out->mapped[r] = 1;
    }
    return FX_OK;
}

void fab_rkey_release(struct fab *f, struct fab_rkey *rk)
{
    for (int r = 0; r < f->nrails; r++) {
        if (rk->mapped[r])
            fi_mr_unmap_key(f->rails[r].domain, rk->key[r]);
        rk->mapped[r] = 0;
    }
}
