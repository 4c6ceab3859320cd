// Prints a Kafka release's topic config definitions (LogConfig's ConfigDef) as JSON, one object
// per config in definition order: name, type, default (ConfigDef.convertToString; null for none),
// validator (its toString), internal. Run against a release's jars:
//   java -cp '.cache/kafka-4.4.0/*' tests/kafka/TopicConfigs.java
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.storage.internals.log.LogConfig;

public class TopicConfigs {
    private static String json(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder("[");
        String sep = "";
        for (ConfigDef.ConfigKey k : LogConfig.configDefCopy().configKeys().values()) {
            String d = k.hasDefault() && k.defaultValue != null ? ConfigDef.convertToString(k.defaultValue, k.type) : null;
            out.append(sep).append("{\"name\":").append(json(k.name)).append(",\"type\":").append(json(k.type.toString()))
               .append(",\"default\":").append(json(d)).append(",\"validator\":")
               .append(json(k.validator == null ? null : k.validator.toString()))
               .append(",\"internal\":").append(k.internalConfig).append("}");
            sep = ",";
        }
        System.out.println(out.append("]"));
    }
}
