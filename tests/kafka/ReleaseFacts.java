// What one Kafka release's own classes say about it, as JSON on standard output: every
// metadata.version level (name, production or not, whether its metadata changed, and the value of
// every level-dependent switch MetadataVersion has), its named levels (MINIMUM_VERSION,
// LATEST_PRODUCTION, ...), every feature beside metadata.version (levels, each level's bootstrap
// metadata.version and dependencies, the default level at each metadata.version), and every API key
// (its version range, stable and with unstable versions, and the listeners it is in scope for), and
// every error code.
//
// Run by tests/kafka/releases.py in source-file mode against a release's cached jars:
//   java -cp '.cache/kafka-4.4.0/*' tests/kafka/ReleaseFacts.java
// It reads by reflection so that one source serves 3.9 (Features) and 4.x (Feature) alike: a name
// a release lacks is left out of its output rather than failing it.

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public class ReleaseFacts {
    public static void main(String[] args) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        // kafka-clients' own record of its version (AppInfoParser reads the same file, from a
        // package that moved in 4.x).
        java.util.Properties built = new java.util.Properties();
        try (var in = ReleaseFacts.class.getClassLoader().getResourceAsStream("kafka/kafka-version.properties")) {
            built.load(in);
        }
        out.put("version", built.getProperty("version"));
        out.put("commit", built.getProperty("commitId"));
        Class<?> mv = Class.forName("org.apache.kafka.server.common.MetadataVersion");
        out.put("metadata_versions", metadataVersions(mv));
        out.put("metadata_version_constants", constants(mv));
        out.put("features", features(mv));
        out.put("api_keys", apiKeys());
        out.put("errors", errors());
        StringBuilder sb = new StringBuilder();
        json(sb, out);
        System.out.println(sb);
    }

    static Object call(Object target, String name) {
        try {
            Method m = target.getClass().getMethod(name);
            m.setAccessible(true);
            return m.invoke(target);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static String mvName(Object level) {
        return level == null ? null : String.valueOf(call(level, "version"));
    }

    static List<Object> metadataVersions(Class<?> mv) throws Exception {
        // Every public no-argument instance method answering a boolean or a short is a switch that
        // depends on the level (isElrSupported, partitionRecordVersion, ...): recorded per level.
        List<Method> switches = new ArrayList<>();
        for (Method m : mv.getMethods()) {
            Class<?> r = m.getReturnType();
            if (Modifier.isStatic(m.getModifiers()) || m.getParameterCount() != 0
                    || !(r == boolean.class || r == short.class)
                    || m.getDeclaringClass() != mv
                    || List.of("featureLevel", "isProduction", "didMetadataChange").contains(m.getName())) {
                continue;
            }
            switches.add(m);
        }
        switches.sort((a, b) -> a.getName().compareTo(b.getName()));
        List<Object> levels = new ArrayList<>();
        for (Object v : mv.getEnumConstants()) {
            Map<String, Object> level = new TreeMap<>();
            level.put("constant", ((Enum<?>) v).name());
            level.put("name", call(v, "version"));
            level.put("level", call(v, "featureLevel"));
            level.put("production", call(v, "isProduction"));
            level.put("metadata_changed", call(v, "didMetadataChange"));
            Map<String, Object> gates = new TreeMap<>();
            for (Method m : switches) {
                try {
                    gates.put(m.getName(), m.invoke(v));
                } catch (ReflectiveOperationException e) {
                    // A switch that throws below some level (registerControllerRecordVersion) says so.
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    gates.put(m.getName(), "throws " + cause.getClass().getSimpleName());
                }
            }
            level.put("gates", gates);
            levels.add(level);
        }
        return levels;
    }

    static Map<String, Object> constants(Class<?> mv) throws Exception {
        Map<String, Object> named = new TreeMap<>();
        for (Field f : mv.getFields()) {
            if (Modifier.isStatic(f.getModifiers()) && f.getType() == mv && !f.isEnumConstant()) {
                named.put(f.getName(), mvName(f.get(null)));
            }
        }
        for (String m : List.of("latestProduction", "latestTesting")) {
            try {
                named.put(m, mvName(mv.getMethod(m).invoke(null)));
            } catch (NoSuchMethodException e) {
                // not in this release
            }
        }
        return named;
    }

    static List<Object> features(Class<?> mv) throws Exception {
        Class<?> fc;
        try {
            fc = Class.forName("org.apache.kafka.server.common.Feature");
        } catch (ClassNotFoundException e) {
            fc = Class.forName("org.apache.kafka.server.common.Features"); // 3.9
        }
        Object production = fc.getField("PRODUCTION_FEATURES").get(null);
        List<Object> features = new ArrayList<>();
        for (Object f : fc.getEnumConstants()) {
            Map<String, Object> feature = new TreeMap<>();
            feature.put("constant", ((Enum<?>) f).name());
            feature.put("name", call(f, "featureName"));
            feature.put("production_feature", ((Collection<?>) production).contains(f));
            feature.put("minimum_production", call(f, "minimumProduction"));
            feature.put("latest_production", call(f, "latestProduction"));
            feature.put("latest_testing", call(f, "latestTesting"));
            List<Object> versions = new ArrayList<>();
            for (Object fv : (Object[]) call(f, "featureVersions")) {
                Map<String, Object> v = new TreeMap<>();
                v.put("constant", fv instanceof Enum<?> e ? e.name() : String.valueOf(fv));
                v.put("level", call(fv, "featureLevel"));
                v.put("bootstrap_metadata_version", mvName(call(fv, "bootstrapMetadataVersion")));
                v.put("dependencies", call(fv, "dependencies"));
                versions.add(v);
            }
            feature.put("levels", versions);
            // The default level a format or an upgrade to each metadata.version picks.
            Method def;
            try {
                def = fc.getMethod("defaultLevel", mv);
            } catch (NoSuchMethodException e) {
                def = fc.getMethod("defaultValue", mv); // 3.9
            }
            Map<String, Object> defaults = new TreeMap<>();
            for (Object v : mv.getEnumConstants()) {
                try {
                    defaults.put(mvName(v), def.invoke(f, v));
                } catch (ReflectiveOperationException e) {
                    defaults.put(mvName(v), "throws");
                }
            }
            feature.put("default_level_at", defaults);
            features.add(feature);
        }
        return features;
    }

    static List<Object> apiKeys() throws Exception {
        Class<?> keys = Class.forName("org.apache.kafka.common.protocol.ApiKeys");
        Class<?> listenerType = Class.forName("org.apache.kafka.common.message.ApiMessageType$ListenerType");
        Method inScope = keys.getMethod("inScope", listenerType);
        Method latest = keys.getMethod("latestVersion", boolean.class);
        List<Object> out = new ArrayList<>();
        for (Object k : keys.getEnumConstants()) {
            Map<String, Object> key = new TreeMap<>();
            key.put("name", keys.getField("name").get(k));
            key.put("constant", ((Enum<?>) k).name());
            key.put("id", keys.getField("id").get(k));
            key.put("min", call(k, "oldestVersion"));
            key.put("max", latest.invoke(k, false));
            key.put("max_unstable", latest.invoke(k, true));
            List<String> listeners = new ArrayList<>();
            for (Object l : listenerType.getEnumConstants()) {
                if ((boolean) inScope.invoke(k, l)) {
                    listeners.add(((Enum<?>) l).name());
                }
            }
            key.put("listeners", listeners);
            key.put("forwardable", keys.getField("forwardable").get(k));
            key.put("cluster_action", keys.getField("clusterAction").get(k));
            out.add(key);
        }
        return out;
    }

    static List<Object> errors() throws Exception {
        Class<?> errors = Class.forName("org.apache.kafka.common.protocol.Errors");
        List<Object> out = new ArrayList<>();
        for (Object e : errors.getEnumConstants()) {
            Map<String, Object> error = new TreeMap<>();
            error.put("name", ((Enum<?>) e).name());
            error.put("code", call(e, "code"));
            error.put("message", call(e, "message"));
            Object exception = call(e, "exception");
            error.put("exception", exception == null ? null : exception.getClass().getSimpleName());
            out.add(error);
        }
        return out;
    }

    static void json(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String s) {
            sb.append('"');
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    default -> {
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                    }
                }
            }
            sb.append('"');
        } else if (o instanceof Boolean || o instanceof Number) {
            sb.append(o);
        } else if (o instanceof Map<?, ?> m) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : new TreeMap<>(m).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection<?> c) {
            sb.append('[');
            boolean first = true;
            for (Object e : c) {
                if (!first) sb.append(',');
                first = false;
                json(sb, e);
            }
            sb.append(']');
        } else if (o instanceof Object[] a) {
            json(sb, Arrays.asList(a));
        } else {
            json(sb, String.valueOf(o));
        }
    }
}
