# Sourced by bin/tokenspeed and bin/test. tokenspeed_find_jdk exports JAVA_HOME as a JDK 25 or
# newer, looking in this order: $JAVA_HOME, the JDK of `java` on PATH, the default install
# location, then the usual places JDKs are installed (/usr/lib/jvm, /usr/local/lib/jvm, /opt,
# ~/.sdkman, ~/.jdks). When it finds none it prints one line saying what to install and exits 1.

TOKENSPEED_DEFAULT_JDK=/usr/lib/jvm/temurin-25-jdk-amd64
TOKENSPEED_MIN_JAVA=25

tokenspeed_java_major() {
  local major
  major=$("$1/bin/java" -version 2>&1 | sed -n 's/.* version "\([0-9][0-9]*\).*/\1/p' | head -n 1)
  echo "${major:-0}"
}

tokenspeed_is_jdk() {
  [ -n "$1" ] && [ -x "$1/bin/java" ] && [ -x "$1/bin/javac" ] &&
    [ "$(tokenspeed_java_major "$1")" -ge "$TOKENSPEED_MIN_JAVA" ]
}

tokenspeed_find_jdk() {
  local candidate on_path=""
  if command -v java >/dev/null 2>&1; then
    on_path=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  fi
  for candidate in "${JAVA_HOME:-}" "$on_path" "$TOKENSPEED_DEFAULT_JDK" \
    /usr/lib/jvm/* /usr/local/lib/jvm/* /opt/java/* /opt/jdk* \
    "${HOME:-/nonexistent}"/.sdkman/candidates/java/* "${HOME:-/nonexistent}"/.jdks/*; do
    if tokenspeed_is_jdk "$candidate"; then
      export JAVA_HOME="$candidate"
      return 0
    fi
  done
  echo "error: TokenSpeed needs a JDK $TOKENSPEED_MIN_JAVA or newer and found none" \
    "(JAVA_HOME=${JAVA_HOME:-<unset>}, java on PATH: ${on_path:-none}, nothing in /usr/lib/jvm or ~/.sdkman);" \
    "install one (for example Eclipse Temurin $TOKENSPEED_MIN_JAVA from https://adoptium.net)" \
    "and set JAVA_HOME to it." >&2
  exit 1
}

# Maven's own JVM (Guice) calls sun.misc.Unsafe, which JDK 24+ warns about; quiet it for JDK 25.
tokenspeed_maven_opts() {
  case " ${MAVEN_OPTS:-} " in
    *" --sun-misc-unsafe-memory-access="*) ;;
    *) export MAVEN_OPTS="${MAVEN_OPTS:+$MAVEN_OPTS }--sun-misc-unsafe-memory-access=allow" ;;
  esac
}
