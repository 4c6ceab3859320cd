import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.kafka.common.utils.Exit;

/**
 * Many Kafka command-line tools in one JVM, so that a test can run dozens of them for the cost of
 * one start. Standard input holds one command per line: the tool's main class, then its
 * arguments, separated by tabs. Each tool's main runs as the shell script would run it; its first
 * call to exit gives the command's code and is turned into an exception (some tools catch that
 * and exit again: the first code is the one the shell would have seen), and after each command one
 * line "--- exit CODE" goes to standard output. The batch's own exit code is 0 once all lines ran.
 */
public class ToolBatch {
    static final class ToolExit extends RuntimeException {
        final int code;

        ToolExit(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    static Integer firstExit;

    public static void main(String[] ignored) throws Exception {
        Exit.setExitProcedure((code, message) -> {
            if (firstExit == null) {
                firstExit = code;
            }
            throw new ToolExit(code);
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] parts = line.split("\t");
            int code = 0;
            firstExit = null;
            try {
                Method main = Class.forName(parts[0]).getMethod("main", String[].class);
                main.invoke(null, (Object) Arrays.copyOfRange(parts, 1, parts.length));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof ToolExit) {
                    code = ((ToolExit) cause).code;
                } else {
                    cause.printStackTrace();
                    code = 1;
                }
            }
            if (firstExit != null) {
                code = firstExit;
            }
            System.out.flush();
            System.err.flush();
            System.out.println("--- exit " + code);
            System.out.flush();
        }
    }
}
