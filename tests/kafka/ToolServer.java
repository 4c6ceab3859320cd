import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;


/**
 * Kafka's command-line tools on request, in one JVM that stays up: a tool run costs its own work,
 * not a JVM start (about a second of CPU each, and the tests run hundreds). tests/kafka/tool_server.py
 * is the other end, and falls back to a fresh JVM for anything this cannot do as the shell would.
 *
 * Requests come on standard input, one per line: the tool's main class, then its arguments,
 * separated by NUL characters. Each runs on a thread of its own. Its standard output and error are
 * captured apart from every other command's: the capture is inherited by the threads the tool
 * starts, so a client thread that a failed tool leaves behind writes into its own command's
 * (closed) capture, never into a later command's. A call to exit (or halt) ends the command with
 * that code, as the JVM's end would, and the calling thread stops there for good: it must not go
 * on to the tool's catch blocks, which a JVM's exit never reaches. The command also ends when its
 * main returns. The replies, on standard output: "--- run" and a newline as the command starts
 * (a JVM that dies before it never ran the command, and the caller may run it elsewhere), then
 * "--- exit CODE OUT_BYTES ERR_BYTES", a newline, and the bytes. Nothing else is written there.
 * At the end of input the JVM exits, running the shutdown hooks the tools added.
 */
public class ToolServer {
    static final class Capture {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();
        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        final CountDownLatch ended = new CountDownLatch(1);
        int code;
        boolean closed;

        synchronized void write(boolean toErr, byte[] b, int off, int len) {
            if (!closed) {
                (toErr ? err : out).write(b, off, len);
            }
        }

        synchronized void end(int exitCode) {
            if (ended.getCount() > 0) {
                code = exitCode;
                ended.countDown();
            }
        }
    }

    static final InheritableThreadLocal<Capture> CURRENT = new InheritableThreadLocal<>();

    /** System.out or System.err: into the current command's capture, else to the server's stderr. */
    static final class Routed extends OutputStream {
        final boolean toErr;
        final OutputStream elsewhere;

        Routed(boolean toErr, OutputStream elsewhere) {
            this.toErr = toErr;
            this.elsewhere = elsewhere;
        }

        @Override
        public void write(int b) throws IOException {
            write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            Capture c = CURRENT.get();
            if (c != null) {
                c.write(toErr, b, off, len);
            } else {
                elsewhere.write(b, off, len);
            }
        }

        @Override
        public void flush() throws IOException {
            if (CURRENT.get() == null) {
                elsewhere.flush();
            }
        }
    }

    /** A tool may close System.out (the metadata shell closes a writer over it); the next must not find it closed. */
    static PrintStream unclosable(OutputStream out) {
        return new PrintStream(out, true) {
            @Override
            public void close() {
                flush();
            }
        };
    }

    /** Kafka's Exit (where its tools exit through) reports to {@link #exitCalled}. The class is
     * found by name: it moved to an internals package in Kafka 4.4. */
    static void catchExits() throws ReflectiveOperationException {
        Class<?> exit;
        try {
            exit = Class.forName("org.apache.kafka.common.utils.internals.Exit");
        } catch (ClassNotFoundException e) {
            exit = Class.forName("org.apache.kafka.common.utils.Exit");
        }
        Class<?> procedure = Class.forName(exit.getName() + "$Procedure");
        Object onExit = java.lang.reflect.Proxy.newProxyInstance(procedure.getClassLoader(),
            new Class<?>[] {procedure}, (proxy, method, args) -> {
                if (method.getName().equals("execute")) {
                    exitCalled((Integer) args[0]);
                    return null;
                }
                return method.invoke(new Object(), args); // equals, hashCode, toString
            });
        exit.getMethod("setExitProcedure", procedure).invoke(null, onExit);
        exit.getMethod("setHaltProcedure", procedure).invoke(null, onExit);
    }

    public static void main(String[] ignored) throws Exception {
        OutputStream replies = new FileOutputStream(FileDescriptor.out);
        PrintStream serverErr = System.err;
        // Before any tool's class is loaded: Scala's Console and log4j's console appender keep the
        // stream they first see.
        System.setOut(unclosable(new Routed(false, serverErr)));
        System.setErr(unclosable(new Routed(true, serverErr)));
        catchExits();
        Charset argCharset = Charset.forName(System.getProperty("sun.jnu.encoding", "UTF-8"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, argCharset));
        String line;
        int n = 0;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split("\0", -1);
            replies.write("--- run\n".getBytes(StandardCharsets.US_ASCII));
            replies.flush();
            Capture capture = new Capture();
            Thread tool = new Thread(() -> {
                CURRENT.set(capture);
                int code = 0;
                try {
                    Class.forName(parts[0]).getMethod("main", String[].class)
                        .invoke(null, (Object) Arrays.copyOfRange(parts, 1, parts.length));
                } catch (InvocationTargetException e) {
                    System.err.print("Exception in thread \"main\" ");
                    e.getCause().printStackTrace();
                    code = 1;
                } catch (ClassNotFoundException e) {
                    System.err.println("Error: Could not find or load main class " + parts[0]);
                    System.err.println("Caused by: " + e);
                    code = 1;
                } catch (ReflectiveOperationException e) {
                    e.printStackTrace();
                    code = 1;
                }
                capture.end(code);
            }, "tool-" + (++n));
            tool.setDaemon(true);
            tool.start();
            capture.ended.await();
            byte[] out;
            byte[] err;
            synchronized (capture) {
                capture.closed = true;
                out = capture.out.toByteArray();
                err = capture.err.toByteArray();
            }
            String head = "--- exit " + capture.code + " " + out.length + " " + err.length + "\n";
            replies.write(head.getBytes(StandardCharsets.US_ASCII));
            replies.write(out);
            replies.write(err);
            replies.flush();
        }
        System.exit(0);
    }

    static void exitCalled(int code) {
        Capture c = CURRENT.get();
        if (c == null) {
            throw new IllegalStateException("exit(" + code + ") outside any command");
        }
        c.end(code);
        while (true) {
            LockSupport.park();
        }
    }
}
