# Sourced by bin/tokenspeed and .ci/run. tokenspeed_find_jdk exports JAVA_HOME as a JDK 25 or
# newer: $JAVA_HOME when it is one, else the default install location, else it explains and exits 1.

TOKENSPEED_DEFAULT_JDK=/usr/lib/jvm/temurin-25-jdk-amd64
TOKENSPEED_MIN_JAVA=25

tokenspeed_java_major() {
  local major
  major=$("$1/bin/java" -version 2>&1 | sed -n 's/.* version "\([0-9][0-9]*\).*/\1/p' | head -n 1)
  echo "${major:-0}"
}

tokenspeed_find_jdk() {
  local candidate
  for candidate in "${JAVA_HOME:-}" "$TOKENSPEED_DEFAULT_JDK"; do
    if [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] &&
      [ "$(tokenspeed_java_major "$candidate")" -ge "$TOKENSPEED_MIN_JAVA" ]; then
      export JAVA_HOME="$candidate"
      return 0
    fi
  done
  echo "error: TokenSpeed needs JDK $TOKENSPEED_MIN_JAVA or newer and found none" \
    "(JAVA_HOME=${JAVA_HOME:-<unset>}, $TOKENSPEED_DEFAULT_JDK: missing or older)." \
    "Install one, for example Eclipse Temurin $TOKENSPEED_MIN_JAVA from https://adoptium.net," \
    "and set JAVA_HOME to it or install it at $TOKENSPEED_DEFAULT_JDK." >&2
  exit 1
}
