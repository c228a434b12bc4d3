package io.tokenspeed.l3.store.mooncake;

/**
 * A snapshot of one {@link MooncakeStore}'s cumulative row and call counts. Each counter is read
 * separately, so a snapshot taken while calls run is not one instant; every counter only grows.
 *
 * <p>{@code putsNewlyWritten} and {@code putsAlreadyExisted} are kept apart on purpose: a
 * create-only PUT that finds its object is a success, but no bytes were written (specification,
 * "Initial scope and validation"). <b>The real Mooncake client cannot tell them apart:</b> its PUT
 * turns the master's {@code OBJECT_ALREADY_EXISTS} into {@code 0} ({@code Client::CollectResults}
 * in {@code client_service.cpp}), so with the real library every PUT that succeeds, new or
 * repeated, is counted in {@code putsNewlyWritten} and {@code putsAlreadyExisted} stays 0. Even
 * {@code putsNewlyWritten} is the SDK's word, not proof of network traffic; use the SDK's transport
 * counters for wire bytes.
 *
 * @param putsNewlyWritten PUT rows the SDK answered {@code 0}: created, or (real library) found
 *     already present
 * @param putsAlreadyExisted PUT rows answered {@code OBJECT_ALREADY_EXISTS}; never with the real
 *     library
 * @param getsOk GET rows that read exactly the destination's length
 * @param getsMissing GET rows answered {@code OBJECT_NOT_FOUND}
 * @param getsInvalid GET rows that read a non-negative count other than the destination's length
 * @param existsOk QUERY rows answered 1
 * @param existsMissing QUERY rows answered 0
 * @param rejected PUT rows answered {@code NO_AVAILABLE_HANDLE}
 * @param retiredFailures GET and PUT rows answered with another code the adapter reads as a retired
 *     failure without object evidence ({@code -703}, {@code -707}, {@code -900}, {@code -901}, ...:
 *     {@link MooncakeCodes})
 * @param unknown rows of any kind answered with another negative code, including every row of a
 *     call whose top-level status failed
 * @param malformed rows whose answer broke the SDK's contract (unwritten, outside the documented
 *     set, or a call that wrote past its rows)
 * @param nativeCalls downcalls into the library, setup and administration included
 * @param reconnectRoundTrips existence queries made to re-establish the master's connection before
 *     the first call after an outage answer (counted in {@code nativeCalls} too)
 */
public record MooncakeCounters(
    long putsNewlyWritten,
    long putsAlreadyExisted,
    long getsOk,
    long getsMissing,
    long getsInvalid,
    long existsOk,
    long existsMissing,
    long rejected,
    long retiredFailures,
    long unknown,
    long malformed,
    long nativeCalls,
    long reconnectRoundTrips) {}
