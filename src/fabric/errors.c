/*
 * The one translation of libfabric's error codes into fx_status_t, so that
 * a caller can tell a timeout, a dead peer, a missing feature or a lack of
 * memory from a local fabric bug. The table is in fabric_int.h.
 */
#include "fabric/fabric_int.h"

fx_status_t fab_status(int fi_ret, fx_status_t otherwise)
{
    switch (fi_ret < 0 ? -fi_ret : fi_ret) {
    case FI_ENOMEM:
        return FX_ERR_NOMEM;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
    case FI_ENOPROTOOPT:
    case FI_EBADFLAGS:
        return FX_ERR_UNSUPPORTED;
    case FI_ETIMEDOUT:
        return FX_ERR_TIMEOUT;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_EHOSTUNREACH:
    case FI_EHOSTDOWN:
    case FI_ENETUNREACH:
    case FI_EREMOTEIO:
        return FX_ERR_PEER;
    case FI_EMFILE:
        return FX_ERR_SYSTEM;
    default:
        return otherwise;
    }
}
