package io.tokenspeed.l3.spi;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * A store that passes every call to another one: the base of wrappers that change one thing (a
 * client several engines share and none may close, a counting or fault-injecting store in tests).
 * {@link #purgeNamespace} goes to the inner store's, so a wrapper that intercepts namespace
 * deletion overrides both it and {@link #deleteNamespace}.
 */
public class ForwardingStore implements Store {
  private final Store inner;

  public ForwardingStore(Store inner) {
    if (inner == null) {
      throw new IllegalArgumentException("the store to forward to is required");
    }
    this.inner = inner;
  }

  /** The store every call goes to. */
  public Store inner() {
    return inner;
  }

  @Override
  public String name() {
    return inner.name();
  }

  @Override
  public boolean failuresRetire() {
    return inner.failuresRetire();
  }

  @Override
  public int maxKeyBytes() {
    return inner.maxKeyBytes();
  }

  @Override
  public long maxValueBytes() {
    return inner.maxValueBytes();
  }

  @Override
  public void registerHostBuffer(MemorySegment hostAllocation) throws Exception {
    inner.registerHostBuffer(hostAllocation);
  }

  @Override
  public StoreResult exists(List<String> keys) throws Exception {
    return inner.exists(keys);
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
    return inner.get(keys, destinations);
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
    return inner.put(keys, sources);
  }

  @Override
  public long deleteNamespace(String namespace) throws Exception {
    return inner.deleteNamespace(namespace);
  }

  @Override
  public NamespaceDeletion purgeNamespace(String namespace) throws Exception {
    return inner.purgeNamespace(namespace);
  }

  @Override
  public void close() throws Exception {
    inner.close();
  }
}
