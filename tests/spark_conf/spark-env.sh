# Sourced by Spark's launch scripts (SPARK_CONF_DIR): the same JVM options as spark-defaults.conf
# for the standalone master and workers, and for the launcher each spark-submit starts first.
JIT_LIGHT="-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC -XX:-UsePerfData"
export SPARK_DAEMON_JAVA_OPTS="$JIT_LIGHT ${SPARK_DAEMON_JAVA_OPTS:-}"
export SPARK_LAUNCHER_OPTS="$JIT_LIGHT ${SPARK_LAUNCHER_OPTS:-}"
unset JIT_LIGHT
