import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.security.PasswordEncoder;

/**
 * Kafka's own password encoder, for tests to check kraftsim's against: arguments are the secret,
 * the cipher algorithm, the key length and the iterations; each standard input line is
 * "encode TAB plain" or "decode TAB encoded", and each answer is one line on standard output.
 */
public class PasswordCodec {
    public static void main(String[] args) throws Exception {
        PasswordEncoder encoder = PasswordEncoder.encrypting(new Password(args[0]), null, args[1],
            Integer.parseInt(args[2]), Integer.parseInt(args[3]));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", 2);
            if (parts[0].equals("encode")) {
                System.out.println(encoder.encode(new Password(parts[1])));
            } else {
                System.out.println(encoder.decode(parts[1]).value());
            }
        }
    }
}
