// Prints a Kafka release's config definitions as JSON. Its broker configs: KafkaConfig's ConfigDef
// (each config in definition order: name, type, default as ConfigDef.convertToString renders it or
// null for none, internal, dynamic: in DynamicBrokerConfig's AllDynamicConfigs), the dynamic-only
// quota configs (DynamicConfig.Broker's names that KafkaConfig does not define), the security
// configs dynamic only with a listener prefix, the listener configs DynamicListenerConfig
// reconfigures, which dynamic configs only a broker's own resource may set, and the synonyms of
// every config that has some. Its topic configs ("topic"): LogConfig's ConfigDef in definition
// order (name, type, default, validator as its toString, internal). The broker classes moved from
// Scala objects (3.9 to 4.3) to Java (4.4), so they are found by reflection under either name.
// Run against a release's jars:
//   java -cp '.cache/kafka-4.4.0/*' tests/kafka/ConfigDefs.java
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.AbstractKafkaConfig;
import org.apache.kafka.storage.internals.log.LogConfig;

public class ConfigDefs {
    private static String json(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String jsonList(Collection<String> xs) {
        StringBuilder b = new StringBuilder("[");
        String sep = "";
        for (String x : xs) {
            b.append(sep).append(json(x));
            sep = ",";
        }
        return b.append("]").toString();
    }

    /** A java.util collection or a Scala one (walked by its iterator), as sorted strings. */
    private static TreeSet<String> strings(Object c) throws Exception {
        TreeSet<String> out = new TreeSet<>();
        if (c instanceof Collection<?> jc) {
            for (Object o : jc) out.add(String.valueOf(o));
            return out;
        }
        Object it = c.getClass().getMethod("iterator").invoke(c);
        Method hasNext = it.getClass().getMethod("hasNext"), next = it.getClass().getMethod("next");
        hasNext.setAccessible(true);
        next.setAccessible(true);
        while ((Boolean) hasNext.invoke(it)) out.add(String.valueOf(next.invoke(it)));
        return out;
    }

    /** The Scala object (Name$.MODULE$) if there is one, else null: members are then static on the Java class. */
    private static Object module(Class<?> scalaObject) throws Exception {
        return scalaObject.getField("MODULE$").get(null);
    }

    /** A member of the Java class (4.4: a static field or method) or of the Scala object (a method). */
    private static Object member(String javaClass, String javaName, String scalaClass, String scalaName,
                                 Object... args) throws Exception {
        Class<?>[] types = new Class<?>[args.length];
        for (int i = 0; i < args.length; i++) types[i] = args[i] instanceof Boolean ? boolean.class : args[i].getClass();
        try {
            Class<?> c = Class.forName(javaClass);
            if (args.length == 0) {
                Field f = c.getField(javaName);
                return f.get(null);
            }
            return c.getMethod(javaName, types).invoke(null, args);
        } catch (ClassNotFoundException | NoSuchFieldException | NoSuchMethodException e) {
            Class<?> c = Class.forName(scalaClass);
            return c.getMethod(scalaName, types).invoke(module(c), args);
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, ConfigDef.ConfigKey> keys = AbstractKafkaConfig.CONFIG_DEF.configKeys();
        String dbc = "org.apache.kafka.server.config.DynamicBrokerConfig", sdbc = "kafka.server.DynamicBrokerConfig$";
        Set<String> dynamic = strings(member(dbc, "ALL_DYNAMIC_CONFIGS", sdbc, "AllDynamicConfigs"));
        Set<String> security = strings(member(dbc, "DYNAMIC_SECURITY_CONFIGS", sdbc, "DynamicSecurityConfigs"));
        Set<String> listener = strings(member(dbc + "$DynamicListenerConfig", "RECONFIGURABLE_CONFIGS",
                                              "kafka.server.DynamicListenerConfig$", "ReconfigurableConfigs"));
        Class<?> broker;
        Object brokerObj;
        try {
            broker = Class.forName("org.apache.kafka.server.config.DynamicConfig$Broker");
            brokerObj = null;
        } catch (ClassNotFoundException e) {
            broker = Class.forName("kafka.server.DynamicConfig$Broker$");
            brokerObj = module(broker);
        }
        TreeSet<String> quota = strings(broker.getMethod("names").invoke(brokerObj));
        quota.removeAll(keys.keySet());

        // perBrokerConfigs(props): of the names in props, those only a broker's own resource may set.
        Properties probe = new Properties();
        List<String> probed = new ArrayList<>(dynamic);
        for (String n : listener) probed.add("listener.name.external." + n);
        for (String n : probed) probe.put(n, "x");
        Object perBroker;
        try {
            perBroker = Class.forName(dbc).getMethod("perBrokerConfigs", Properties.class).invoke(null, probe);
        } catch (ClassNotFoundException | NoSuchMethodException e) {
            Class<?> c = Class.forName(sdbc);
            Method m = c.getMethod("kafka$server$DynamicBrokerConfig$$perBrokerConfigs", Properties.class);
            perBroker = m.invoke(module(c), probe);
        }

        StringBuilder out = new StringBuilder("{\"configs\":[");
        String sep = "";
        for (ConfigDef.ConfigKey k : keys.values()) {
            String d = k.hasDefault() && k.defaultValue != null ? ConfigDef.convertToString(k.defaultValue, k.type) : null;
            out.append(sep).append("{\"name\":").append(json(k.name)).append(",\"type\":").append(json(k.type.toString()))
               .append(",\"default\":").append(json(d)).append(",\"internal\":").append(k.internalConfig)
               .append(",\"dynamic\":").append(dynamic.contains(k.name)).append("}");
            sep = ",";
        }
        out.append("],\"quota\":").append(jsonList(quota))
           .append(",\"dynamic_security\":").append(jsonList(security))
           .append(",\"listener_reconfigurable\":").append(jsonList(listener))
           .append(",\"per_broker\":").append(jsonList(strings(perBroker)))
           .append(",\"synonyms\":{");
        List<String> named = new ArrayList<>(keys.keySet());
        for (String n : new String[]{"listener.name.external.ssl.keystore.type",
                                     "listener.name.external.plain.sasl.jaas.config",
                                     "listener.name.external.scram-sha-256.connections.max.reauth.ms"}) named.add(n);
        sep = "";
        for (String n : named) {
            Object syns = member(dbc, "brokerConfigSynonyms", sdbc, "brokerConfigSynonyms", n, true);
            List<String> list = new ArrayList<>();
            if (syns instanceof List<?> jl) {
                for (Object o : jl) list.add(String.valueOf(o));
            } else {
                Object it = syns.getClass().getMethod("iterator").invoke(syns);
                Method hasNext = it.getClass().getMethod("hasNext"), next = it.getClass().getMethod("next");
                hasNext.setAccessible(true);
                next.setAccessible(true);
                while ((Boolean) hasNext.invoke(it)) list.add(String.valueOf(next.invoke(it)));
            }
            if (list.size() == 1 && list.get(0).equals(n)) continue;
            out.append(sep).append(json(n)).append(":").append(jsonList(list));
            sep = ",";
        }
        out.append("},\"topic\":[");
        sep = "";
        for (ConfigDef.ConfigKey k : LogConfig.configDefCopy().configKeys().values()) {
            String d = k.hasDefault() && k.defaultValue != null ? ConfigDef.convertToString(k.defaultValue, k.type) : null;
            out.append(sep).append("{\"name\":").append(json(k.name)).append(",\"type\":").append(json(k.type.toString()))
               .append(",\"default\":").append(json(d)).append(",\"validator\":")
               .append(json(k.validator == null ? null : k.validator.toString()))
               .append(",\"internal\":").append(k.internalConfig).append("}");
            sep = ",";
        }
        System.out.println(out.append("]}"));
    }
}
