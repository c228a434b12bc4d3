package io.tokenspeed.l3;

/**
 * How {@link L3Executor#close()} ended.
 *
 * @param storeClosed true when the store was closed (every call retired, nothing quarantined)
 * @param restartRequired true when some native I/O could not be proven retired: the store client
 *     and the Host allocation are kept for the life of the process, and only a restart reclaims
 *     them
 * @param unjoinedWorkers workers still inside a store call when the join deadline passed (idle
 *     workers never count, whatever the deadline)
 * @param quarantinedJobs jobs whose retirement was never proven: unretired results, results of a
 *     call that threw an {@link Error}, and GET/PUT calls still inside the store at the deadline
 * @param message one line for the operator
 */
public record CloseReport(
    boolean storeClosed,
    boolean restartRequired,
    int unjoinedWorkers,
    int quarantinedJobs,
    String message) {}
