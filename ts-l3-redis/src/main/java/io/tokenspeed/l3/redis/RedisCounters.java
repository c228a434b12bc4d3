package io.tokenspeed.l3.redis;

/**
 * A snapshot of one {@link RedisStore}'s cumulative row and call counts. Each counter is read
 * separately, so a snapshot taken while calls run is not one instant; every counter only grows.
 *
 * <p>{@code putsNewlyWritten} and {@code putsAlreadyExisted} are kept apart on purpose: a
 * create-only PUT that finds its object ({@code SET ... NX} answered nil) is a success, but this
 * client created nothing. Of several writers racing one key, exactly one sees it newly written.
 *
 * @param putsNewlyWritten PUT rows answered {@code OK} by {@code SET NX}
 * @param putsAlreadyExisted PUT rows answered nil by {@code SET NX}: the key existed
 * @param putsRejected PUT rows refused with {@code OOM} (the server is full): {@code Rejected}
 * @param getsOk GET rows that read exactly the destination's length
 * @param getsMissing GET rows for absent keys
 * @param getsInvalid GET rows of another length or type
 * @param existsOk QUERY rows for present keys
 * @param existsMissing QUERY rows for absent keys
 * @param failedCalls store calls that threw after sending commands (timeouts, lost connections,
 *     permission and server errors)
 * @param abandonedReads GET rows of a failed call left without their reply
 * @param lateReplies over TLS (Lettuce), GET replies that arrived after their row was abandoned,
 *     and were dropped without touching the destination; always 0 on the direct path, which closes
 *     a failed call's connections and so never reads a reply late
 * @param commands commands sent (one per row, and once more per redirection; SCAN and UNLINK pages
 *     of namespace deletion too)
 * @param redirects MOVED and ASK replies followed (Redis Cluster)
 * @param connectionsOpened direct-path connections opened, at startup and since (a count that keeps
 *     growing means connections keep failing)
 */
public record RedisCounters(
    long putsNewlyWritten,
    long putsAlreadyExisted,
    long putsRejected,
    long getsOk,
    long getsMissing,
    long getsInvalid,
    long existsOk,
    long existsMissing,
    long failedCalls,
    long abandonedReads,
    long lateReplies,
    long commands,
    long redirects,
    long connectionsOpened) {}
