/*
 * What a provider offers on this node and what fabxfer would do with it,
 * for fabxfer-info: its attributes under fabxfer's hints, the profile's
 * decision (or refusal), whether it has an FI_HMEM entry, and, given a
 * buffer of GPU memory, whether it really registers it. Opens nothing but
 * a throw-away fabric and domain for that registration.
 */
#include <stdio.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

static void mr_mode_str(int mode, char *buf, size_t len)
{
    static const struct { int bit; const char *name; } bits[] = {
        {FI_MR_LOCAL, "LOCAL"},       {FI_MR_RAW, "RAW"},
        {FI_MR_VIRT_ADDR, "VIRT_ADDR"}, {FI_MR_ALLOCATED, "ALLOCATED"},
        {FI_MR_PROV_KEY, "PROV_KEY"}, {FI_MR_MMU_NOTIFY, "MMU_NOTIFY"},
        {FI_MR_RMA_EVENT, "RMA_EVENT"}, {FI_MR_ENDPOINT, "ENDPOINT"},
        {FI_MR_HMEM, "HMEM"},
    };
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if ((mode & bits[i].bit) && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                     used ? "|" : "", bits[i].name);
    if (buf[0] == '\0')
        snprintf(buf, len, "none");
}

/* Register len bytes of CUDA memory of device dev on a domain of info. */
static int try_cuda_reg(const struct fi_info *info, void *gpu, size_t len,
                        int dev, char *why, size_t wlen)
{
    struct fid_fabric *fabric = NULL;
    struct fid_domain *domain = NULL;
    struct fid_mr *mr = NULL;
    struct iovec iov = {gpu, len};
    struct fi_mr_attr attr = {0};
    int ret;

    if ((ret = fi_fabric(info->fabric_attr, &fabric, NULL)) != 0 ||
        (ret = fi_domain(fabric, (struct fi_info *)info, &domain, NULL)) !=
            0) {
        snprintf(why, wlen, "cannot open its FI_HMEM domain: %s",
                 fi_strerror(-ret));
        goto out;
    }
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_REMOTE_WRITE | FI_WRITE;
    attr.requested_key = 1;
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = dev;
    ret = fi_mr_regattr(domain, &attr, FI_HMEM_DEVICE_ONLY, &mr);
    if (ret != 0)
        snprintf(why, wlen, "fi_mr_regattr of %zu bytes of CUDA device %d "
                 "memory failed: %s", len, dev, fi_strerror(-ret));
    else
        snprintf(why, wlen, "fi_mr_regattr of %zu bytes of CUDA device %d "
                 "memory succeeded", len, dev);
out:
    if (mr != NULL)
        fi_close(&mr->fid);
    if (domain != NULL)
        fi_close(&domain->fid);
    if (fabric != NULL)
        fi_close(&fabric->fid);
    return ret == 0;
}

/* What a provider does not protect, where it is known. shm (seen on
 * libfabric 1.17): a same-host peer's fi_read of a region registered for
 * remote write only succeeded, and so did one of an address never
 * registered, with any key; shm moves RMA with cross-memory attach
 * (process_vm_readv/writev), which the kernel allows to every process
 * that may ptrace this one, i.e. every process of the same user, and
 * checks no key. tcp;ofi_rxm refused both. */
static void describe_isolation(const char *prov, char *buf, size_t len)
{
    if (strcmp(prov, "shm") == 0)
        snprintf(buf, len, "none between processes of the same user on "
                 "this host (CMA): any of them may read or write the "
                 "memory of this process, registered or not, whatever the "
                 "key; FABXFER_ISOLATE=1 never takes shm");
    else
        buf[0] = '\0';
}

void fab_describe(const char *prov, void *gpu, size_t gpu_len, int gpu_dev,
                  struct fab_desc *d)
{
    struct fi_info *list, *hlist;
    struct fab_tuning tuning = {"auto", 0};
    struct fab_profile prof;
    int ret;

    memset(d, 0, sizeof(*d));
    snprintf(d->prov, sizeof(d->prov), "%s", prov);
    describe_isolation(prov, d->isolation, sizeof(d->isolation));
    d->gpu_reg = -1;
    list = fab_query(prov, 0, &ret);
    if (list == NULL) {
        d->offered = fab_offered(prov);
        snprintf(d->why, sizeof(d->why), "%s",
                 d->offered ? "no FI_RMA one-sided writes on FI_EP_RDM"
                            : "not on this node");
        return;
    }
    d->offered = d->rma = 1;
    snprintf(d->domain, sizeof(d->domain), "%s",
             list->domain_attr->name ? list->domain_attr->name : "");
    fab_distinct_names(list, 1, d->domains, sizeof(d->domains));
    d->cq_data_size = list->domain_attr->cq_data_size;
    d->max_msg_size = list->ep_attr->max_msg_size;
    d->inject_size = list->tx_attr->inject_size;
    mr_mode_str(list->domain_attr->mr_mode, d->mr_mode, sizeof(d->mr_mode));
    if (fab_profile_make(list, fi_version(), &tuning, &prof) == FX_OK) {
        d->usable = 1;
        snprintf(d->notify, sizeof(d->notify), "%s",
                 prof.notify == FAB_NOTIFY_WRITEDATA ? "writedata"
                                                     : "message");
        snprintf(d->why, sizeof(d->why), "%s", prof.notify_why);
        d->chunk = prof.chunk;
        d->iov_limit = prof.iov_limit;
        d->rma_iov_limit = prof.rma_iov_limit;
    } else {
        snprintf(d->why, sizeof(d->why), "%s", err_last());
    }
    fi_freeinfo(list);

    /* The same request with device memory, as the GPU probe makes it. */
    hlist = fab_query(prov, 1, &ret);
    d->hmem = hlist != NULL;
    if (!d->hmem)
        snprintf(d->hmem_why, sizeof(d->hmem_why), "no FI_HMEM entry "
                 "(fi_getinfo: %s)", fi_strerror(-ret));
    else if (gpu != NULL)
        d->gpu_reg = try_cuda_reg(hlist, gpu, gpu_len, gpu_dev, d->hmem_why,
                                  sizeof(d->hmem_why));
    else
        snprintf(d->hmem_why, sizeof(d->hmem_why), "offers FI_HMEM; no GPU "
                 "here to try a registration");
    fi_freeinfo(hlist);
}

void fab_runtime_version(char *buf, size_t len)
{
    uint32_t v = fi_version();

    snprintf(buf, len, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
}
