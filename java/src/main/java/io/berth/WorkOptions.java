package io.berth;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The options actors and tasks share (label selectors, tolerations, resources,
 * strategy, name), checked as they are set with the head's field names and rules.
 */
public abstract class WorkOptions<T extends WorkOptions<T>> {
  final Map<String, Object> resources = new LinkedHashMap<>();
  Map<String, String> labelSelector;
  Map<String, String> tolerations;
  SchedulingStrategy strategy;
  String name;

  WorkOptions() {}

  @SuppressWarnings("unchecked")
  private T self() {
    return (T) this;
  }

  /** Reserves {@code amount} of {@code name} (CPU, GPU, memory in bytes, or a custom name). */
  public T setResource(String name, double amount) {
    resourceName("resources." + name, name);
    resources.put(name, amount(name, amount));
    return self();
  }

  /**
   * Reserves {@code amount} of {@code name}, as text: a decimal with an optional suffix,
   * decimal ({@code k}, {@code M}, {@code G}, {@code T}, {@code P}) or binary ({@code Ki},
   * {@code Mi}, {@code Gi}, {@code Ti}, {@code Pi}), such as {@code setResource("memory", "16Gi")}.
   */
  public T setResource(String name, String amount) {
    resourceName("resources." + name, name);
    resources.put(name, amount(name, amount, false));
    return self();
  }

  /** Reserves these resources. */
  public T setResources(Map<String, Double> resources) {
    resources.forEach(this::setResource);
    return self();
  }

  /** Node labels that must hold (a label selector), key to expression ({@code "in(a,b)"}, {@code "!exists()"}). */
  public T setLabelSelector(Map<String, String> selector) {
    Labels.checkSelector("label_selector", selector);
    this.labelSelector = selector;
    return self();
  }

  /** Taints it accepts (tolerations), key to expression ({@code "exists()"}). */
  public T setTolerations(Map<String, String> tolerations) {
    Labels.checkSelector("tolerations", tolerations);
    this.tolerations = tolerations;
    return self();
  }

  /** How the head chooses its node. */
  public T setSchedulingStrategy(SchedulingStrategy strategy) {
    this.strategy = strategy;
    return self();
  }

  /** A name (actors: unique among the live actors of the namespace). */
  public T setName(String name) {
    if (name == null || name.isEmpty() || name.length() > 253) {
      throw new BerthException("name", "must be 1 to 253 characters", null);
    }
    this.name = name;
    return self();
  }

  private static final Pattern RESOURCE = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_./:-]{0,252}");

  /** A resource name: 1 to 253 letters, digits, '-', '_', '.', '/' and ':', starting with a letter or digit. */
  static void resourceName(String field, String name) {
    if (name == null || !RESOURCE.matcher(name).matches()) {
      throw new BerthException(field, "resource name \"" + name + "\" is invalid: use 1 to 253 characters of letters, "
          + "digits, '-', '_', '.', '/' and ':', starting with a letter or digit", null);
    }
  }

  /** Amounts count in units of 1/10000 (berth-core's quantity.rs), at most 10^14 whole. */
  private static final BigInteger UNITS_PER_WHOLE = BigInteger.valueOf(10_000);
  private static final BigInteger MAX_UNITS = BigInteger.TEN.pow(14).multiply(UNITS_PER_WHOLE);
  private static final Map<String, BigInteger> SUFFIXES = Map.ofEntries(
      Map.entry("", BigInteger.ONE),
      Map.entry("k", BigInteger.TEN.pow(3)),
      Map.entry("K", BigInteger.TEN.pow(3)),
      Map.entry("M", BigInteger.TEN.pow(6)),
      Map.entry("G", BigInteger.TEN.pow(9)),
      Map.entry("T", BigInteger.TEN.pow(12)),
      Map.entry("P", BigInteger.TEN.pow(15)),
      Map.entry("Ki", BigInteger.TWO.pow(10)),
      Map.entry("Mi", BigInteger.TWO.pow(20)),
      Map.entry("Gi", BigInteger.TWO.pow(30)),
      Map.entry("Ti", BigInteger.TWO.pow(40)),
      Map.entry("Pi", BigInteger.TWO.pow(50)));

  /** An amount of a request as the head's decimal text, checked as the head checks it. */
  static String amount(String resource, double amount) {
    return amount(resource, amount, false);
  }

  /** An amount of a request ({@code bundle} false) or a group's bundle, as the head's decimal text. */
  static String amount(String resource, double amount, boolean bundle) {
    String field = "resources." + resource;
    if (Double.isNaN(amount) || Double.isInfinite(amount)) {
      throw new BerthException(field, amount + " is not a finite number", null);
    }
    if (amount == 0) {
      return "0"; // also -0.0
    }
    if (amount < 0) {
      throw new BerthException(field, amount + " is negative; amounts must be 0 or more", null);
    }
    // The double's decimal (1.0E-5 is 0.00001), exactly as text.
    String text = new BigDecimal(Double.toString(amount)).stripTrailingZeros().toPlainString();
    checkUnits(field, resource, text, bundle);
    return text;
  }

  /** An amount given as text ({@code "0.5"}, {@code "16Gi"}), as the head's decimal text. */
  static String amount(String resource, String amount, boolean bundle) {
    String field = "resources." + resource;
    if (amount == null) {
      throw new BerthException(field, "null is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")", null);
    }
    checkUnits(field, resource, amount, bundle);
    return Labels.trim(amount);
  }

  /** The rule of a resource shared per instance (GPU): below 1 or whole. */
  private static void checkUnits(String field, String resource, String text, boolean bundle) {
    BigInteger units = units(field, text);
    if (resource.equals("GPU") && units.compareTo(UNITS_PER_WHOLE) > 0
        && units.mod(UNITS_PER_WHOLE).signum() != 0) {
      String what = bundle ? "a bundle asks for a share below 1 or whole instances"
          : "a request must be below 1 (a share of one instance) or a whole number of instances";
      throw new BerthException(field, Labels.trim(text) + " is not allowed: GPU is shared per instance, so " + what, null);
    }
  }

  /**
   * {@code text} in units of 1/10000: berth-core's {@code Quantity::parse}, step by step, so
   * that each input is refused for the same reason.
   */
  static BigInteger units(String field, String text) {
    String trimmed = Labels.trim(text);
    if (trimmed.startsWith("-")) {
      throw new BerthException(field, trimmed + " is negative; amounts must be 0 or more", null);
    }
    String malformed = "\"" + text + "\" is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")";
    int end = 0;
    while (end < trimmed.length() && "0123456789.".indexOf(trimmed.charAt(end)) >= 0) {
      end++;
    }
    String number = trimmed.substring(0, end);
    BigInteger multiplier = SUFFIXES.get(trimmed.substring(end));
    if (multiplier == null) {
      throw new BerthException(field, malformed, null);
    }
    int dot = number.indexOf('.');
    String intPart = dot < 0 ? number : number.substring(0, dot);
    String fracPart = dot < 0 ? "" : number.substring(dot + 1);
    if (intPart.isEmpty() || fracPart.contains(".") || (dot >= 0 && fracPart.isEmpty())) {
      throw new BerthException(field, malformed, null);
    }
    intPart = intPart.replaceFirst("^0+", "");
    fracPart = fracPart.replaceFirst("0+$", "");
    String overflow = trimmed + " is larger than the maximum amount 100000000000000 (1e14)";
    String below = trimmed + " is below the resolution of 0.0001; the smallest non-zero amount is 0.0001";
    String tooPrecise = trimmed + " has more than 4 decimal places; amounts are exact to 0.0001 and are not rounded";
    // Size before precision: a number too large is reported as such.
    if (intPart.length() > 20) {
      throw new BerthException(field, overflow, null);
    }
    BigInteger unitsPerWhole = multiplier.multiply(UNITS_PER_WHOLE);
    BigInteger intValue = intPart.isEmpty() ? BigInteger.ZERO : new BigInteger(intPart);
    BigInteger intUnits = intValue.multiply(unitsPerWhole);
    if (intUnits.compareTo(MAX_UNITS) > 0) {
      throw new BerthException(field, overflow, null);
    }
    if (fracPart.length() > 30) {
      boolean tiny = intPart.isEmpty() && fracPart.substring(0, 30).chars().allMatch(c -> c == '0');
      throw new BerthException(field, tiny ? below : tooPrecise, null);
    }
    BigInteger fracUnits = BigInteger.ZERO;
    if (!fracPart.isEmpty()) {
      BigInteger num = new BigInteger(fracPart);
      BigInteger den = BigInteger.TEN.pow(fracPart.length());
      BigInteger common = num.gcd(den);
      num = num.divide(common);
      den = den.divide(common);
      if (unitsPerWhole.mod(den).signum() != 0) {
        boolean isBelow = intValue.signum() == 0 && num.multiply(unitsPerWhole).compareTo(den) < 0;
        throw new BerthException(field, isBelow ? below : tooPrecise, null);
      }
      fracUnits = num.multiply(unitsPerWhole.divide(den));
    }
    BigInteger units = intUnits.add(fracUnits);
    if (units.compareTo(MAX_UNITS) > 0) {
      throw new BerthException(field, overflow, null);
    }
    return units;
  }

  /** The REST body's placement and resource keys. */
  Map<String, Object> body(Berth.Session session, String command, Object args, Map<String, String> env) {
    var body = new LinkedHashMap<String, Object>();
    body.put("command", command);
    body.put("args", args);
    body.put("env", env);
    body.put("resources", resources);
    body.put("namespace", session.namespace);
    if (strategy != null) {
      body.put("scheduling_strategy", strategy.toRest());
    }
    if (labelSelector != null) {
      body.put("label_selector", labelSelector);
    }
    if (tolerations != null) {
      body.put("tolerations", tolerations);
    }
    if (name != null) {
      body.put("name", name);
    }
    session.own(body);
    return body;
  }
}
