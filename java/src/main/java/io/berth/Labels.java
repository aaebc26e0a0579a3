package io.berth;

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

  private Labels() {}

  static void checkKey(String field, String key) {
    boolean ok;
    if (key == null) {
      ok = false;
    } else if (key.contains("/")) {
      String prefix = key.substring(0, key.indexOf('/'));
      String name = key.substring(key.indexOf('/') + 1);
      ok = !prefix.isEmpty() && prefix.length() <= 253 && !name.contains("/") && NAME.matcher(name).matches();
      for (String part : prefix.split("\\.", -1)) {
        ok &= PREFIX_PART.matcher(part).matches();
      }
    } else {
      ok = NAME.matcher(key).matches();
    }
    if (!ok) {
      throw new BerthException(field, "label key \"" + key + "\" is invalid: " + NAME_RULE, null);
    }
  }

  static void checkValue(String field, String key, String value) {
    if (value == null || !(value.isEmpty() || NAME.matcher(value).matches())) {
      throw new BerthException(
          field, "label \"" + key + "\": value \"" + value + "\" is invalid: " + VALUE_RULE, null);
    }
  }

  static void checkLabels(String field, Map<String, String> labels) {
    if (labels == null) {
      return;
    }
    labels.forEach((k, v) -> {
      checkKey(field + "." + k, k);
      checkValue(field + "." + k, k, v);
    });
  }

  /** Keys only: the head checks expressions' grammar and answers with the field and rule. */
  static void checkSelector(String field, Map<String, String> selector) {
    if (selector == null) {
      return;
    }
    selector.keySet().forEach(k -> checkKey(field + "." + k, k));
  }
}
