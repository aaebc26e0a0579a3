package io.berth;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.regex.Pattern;

/** The head's label rules (Kubernetes syntax), checked before anything is sent. */
final class Labels {
  private static final Pattern NAME = Pattern.compile("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$");
  private static final Pattern PREFIX_PART = Pattern.compile("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
  static final String NAME_RULE = "a name is 1 to 63 characters of letters, digits, '-', '_' and '.', "
      + "beginning and ending with a letter or digit";
  static final String VALUE_RULE = "a value is empty or 1 to 63 characters of letters, digits, '-', '_' "
      + "and '.', beginning and ending with a letter or digit";
  static final String PREFIX_RULE = "a prefix is a DNS subdomain of at most 253 characters: lower-case "
      + "letters, digits, '-' and '.', each dot-separated part beginning and ending with a letter or digit";
  /** The label key the head sets on every actor (its ID); an actor's own labels cannot hold it. */
  static final String ACTOR_ID = "berth.io/actor-id";

  private Labels() {}

  static void checkKey(String field, String key) {
    String rule = null;
    if (key == null) {
      rule = NAME_RULE;
    } else if (key.contains("/")) {
      String prefix = key.substring(0, key.indexOf('/'));
      String name = key.substring(key.indexOf('/') + 1);
      boolean prefixOk = !prefix.isEmpty() && prefix.length() <= 253;
      for (String part : prefix.split("\\.", -1)) {
        prefixOk &= PREFIX_PART.matcher(part).matches();
      }
      if (!prefixOk) {
        rule = PREFIX_RULE;
      } else if (name.contains("/") || !NAME.matcher(name).matches()) {
        rule = NAME_RULE;
      }
    } else if (!NAME.matcher(key).matches()) {
      rule = NAME_RULE;
    }
    if (rule != null) {
      throw new BerthException(field, "label key \"" + key + "\" is invalid: " + rule, null);
    }
  }

  static void checkValue(String field, String key, String value) {
    if (value == null || !(value.isEmpty() || NAME.matcher(value).matches())) {
      throw new BerthException(
          field, "label \"" + key + "\": value \"" + value + "\" is invalid: " + VALUE_RULE, null);
    }
  }

  /** An actor's labels: the label rules, and {@code berth.io/actor-id} is Berth's. */
  static void checkActorLabels(String field, Map<String, String> labels) {
    if (labels == null) {
      return;
    }
    labels.forEach((k, v) -> checkActorLabel(field + "." + k, k, v));
  }

  /** One label of an actor. */
  static void checkActorLabel(String field, String key, String value) {
    checkKey(field, key);
    checkValue(field, key, value);
    if (ACTOR_ID.equals(key)) {
      throw new BerthException(
          field, "label key \"" + ACTOR_ID + "\" is set by Berth to the actor's ID and cannot be given", null);
    }
  }

  /**
   * True for the characters the head trims (Rust's {@code char::is_whitespace}, Unicode's
   * White_Space): Java's {@code trim} and {@code strip} differ (U+00A0, U+001C to U+001F).
   */
  static boolean isWhiteSpace(char c) {
    return (c >= '\t' && c <= '\r') || c == ' ' || c == '\u0085' || c == '\u00a0' || c == '\u1680'
        || (c >= '\u2000' && c <= '\u200a') || c == '\u2028' || c == '\u2029' || c == '\u202f'
        || c == '\u205f' || c == '\u3000';
  }

  /** {@code text} without leading and trailing white space, as the head trims it. */
  static String trim(String text) {
    int start = 0;
    int end = text.length();
    while (start < end && isWhiteSpace(text.charAt(start))) {
      start++;
    }
    while (end > start && isWhiteSpace(text.charAt(end - 1))) {
      end--;
    }
    return text.substring(start, end);
  }

  private static String trimStart(String text) {
    int start = 0;
    while (start < text.length() && isWhiteSpace(text.charAt(start))) {
      start++;
    }
    return text.substring(start);
  }

  /** A selector or tolerations: each key and each expression (the label-selector grammar). */
  static void checkSelector(String field, Map<String, String> selector) {
    if (selector == null) {
      return;
    }
    selector.forEach((k, v) -> {
      checkKey(field + "." + k, k);
      String rule = expressionRule(v);
      if (rule != null) {
        throw new BerthException(field + "." + k, "expression \"" + v + "\" is invalid: " + rule, null);
      }
    });
  }

  /**
   * Why {@code text} is not an expression ({@code v}, {@code !v}, {@code in(a,b)},
   * {@code !in(a,b)}, {@code exists()}, {@code !exists()}, joined by commas), or null; the head's
   * rules and words.
   */
  static String expressionRule(String text) {
    if (text == null) {
      return "an expression is a string";
    }
    if (trim(text).isEmpty()) {
      return null;
    }
    var parts = new java.util.ArrayList<String>();
    int depth = 0;
    int start = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '(') {
        depth++;
      } else if (c == ')') {
        if (depth == 0) {
          return "a ')' without its '('";
        }
        depth--;
      } else if (c == ',' && depth == 0) {
        parts.add(text.substring(start, i));
        start = i + 1;
      }
    }
    if (depth > 0) {
      return "a '(' is not closed with ')'";
    }
    parts.add(text.substring(start));
    for (String part : parts) {
      String rule = conditionRule(trim(part));
      if (rule != null) {
        return rule;
      }
    }
    return null;
  }

  private static String conditionRule(String text) {
    if (text.isEmpty()) {
      return "an empty condition between commas";
    }
    if (text.startsWith("!!")) {
      return "more than one '!'";
    }
    // After "! ", a second '!' is part of a value (and so not a label value).
    String body = text.startsWith("!") ? trimStart(text.substring(1)) : text;
    int open = body.indexOf('(');
    if (open < 0) {
      return valueRule(body);
    }
    String operator = asciiLowerCase(trim(body.substring(0, open)));
    if (!body.endsWith(")")) {
      return "text after the closing ')' of " + operator + "(…)";
    }
    String inner = body.substring(open + 1, body.length() - 1);
    if (inner.contains("(") || inner.contains(")")) {
      return "parentheses inside parentheses";
    }
    switch (operator) {
      case "in":
        if (trim(inner).isEmpty()) {
          return "in() needs at least one value";
        }
        for (String value : inner.split(",", -1)) {
          if (trim(value).isEmpty()) {
            return "an empty value in in(…)";
          }
          String rule = valueRule(trim(value));
          if (rule != null) {
            return rule;
          }
        }
        return null;
      case "exists":
        return trim(inner).isEmpty() ? null : "exists() takes no values";
      case "":
        return "a '(' without an operator; use in(…) or exists()";
      default:
        return "unknown operator \"" + operator + "\"; use in(…) or exists()";
    }
  }

  /** Only ASCII letters change case, as in the head. */
  private static String asciiLowerCase(String text) {
    var out = new StringBuilder(text.length());
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      out.append(c >= 'A' && c <= 'Z' ? (char) (c + ('a' - 'A')) : c);
    }
    return out.toString();
  }

  private static String valueRule(String value) {
    if (value.isEmpty() || NAME.matcher(value).matches()) {
      return null;
    }
    if (value.getBytes(StandardCharsets.UTF_8).length > 63) {
      return "value \"" + value + "\" is longer than 63 characters";
    }
    return "value \"" + value + "\" is not a label value (letters, digits, '-', '_' and '.', beginning and "
        + "ending with a letter or digit)";
  }
}
