package io.berth;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * Berth's worker protocol, version 1 (docs/worker-protocol.md): a frame is a u32 big-endian
 * header length, a JSON header, a u64 big-endian payload length and the payload. Java values
 * travel with the {@code json} codec.
 */
final class Frames {
  static final ObjectMapper JSON = new ObjectMapper();
  static final String CODEC = "json";
  private static final int MAX_HEADER = 1 << 20;

  private Frames() {}

  /** One frame: header and payload. */
  record Frame(Map<String, Object> header, byte[] payload) {}

  static void send(DataOutputStream out, Map<String, Object> header, byte[] payload) throws IOException {
    byte[] head = JSON.writeValueAsBytes(header);
    synchronized (out) {
      out.writeInt(head.length);
      out.write(head);
      out.writeLong(payload.length);
      out.write(payload);
      out.flush();
    }
  }

  @SuppressWarnings("unchecked")
  static Frame recv(DataInputStream in) throws IOException {
    int size = in.readInt();
    if (size < 0 || size > MAX_HEADER) {
      throw new IOException("a header of " + size + " bytes is over the limit");
    }
    byte[] head = in.readNBytes(size);
    if (head.length < size) {
      throw new EOFException("the connection was closed inside a frame");
    }
    long length = in.readLong();
    if (length < 0 || length > Integer.MAX_VALUE - 8) {
      throw new IOException("a payload of " + length + " bytes is over the limit");
    }
    byte[] payload = in.readNBytes((int) length);
    if (payload.length < length) {
      throw new EOFException("the connection was closed inside a payload");
    }
    return new Frame(JSON.readValue(head, Map.class), payload);
  }

  static byte[] json(Object value) {
    try {
      return JSON.writeValueAsBytes(value);
    } catch (IOException e) {
      throw new BerthException("cannot encode " + value + " as JSON: " + e.getMessage());
    }
  }

  static String text(byte[] bytes) {
    return new String(bytes, StandardCharsets.UTF_8);
  }
}
