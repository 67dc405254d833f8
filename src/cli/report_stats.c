/* sdgp report: Welch's t-test (declared in cli/report.h), written here so that the report needs no
 * statistics library. The Student-t tail is the regularized incomplete beta function,
 * P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2), evaluated by its continued fraction with the
 * modified Lentz method (Numerical Recipes, 3rd ed., section 6.4). */
#include <math.h>

#include "cli/report.h"

/* The continued fraction of I_x(a, b), which converges fast for x < (a + 1) / (a + b + 2). */
static double beta_cf(double a, double b, double x) {
    const double tiny = 1e-300, eps = 1e-15;
    double qab = a + b, qap = a + 1, qam = a - 1, c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 1000; m++) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2)); /* even step */
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)); /* odd step */
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < eps) return h;
    }
    return NAN;
}

double rp_betai(double a, double b, double x) {
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return NAN;
    if (x == 0 || x == 1) return x;
    /* x^a (1-x)^b / (a B(a, b)) in logs: the factor in front of the continued fraction */
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1) / (a + b + 2)) return front * beta_cf(a, b, x) / a;
    return 1 - front * beta_cf(b, a, 1 - x) / b; /* the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) */
}

double rp_t_two_sided_p(double t, double df) {
    if (isnan(t) || !(df > 0)) return NAN;
    if (isinf(t)) return 0;
    return rp_betai(df / 2, 0.5, df / (df + t * t));
}

int rp_welch(double mean1, double sd1, int n1, double mean2, double sd2, int n2, double *t, double *df, double *p) {
    if (n1 < 2 || n2 < 2 || !isfinite(sd1) || !isfinite(sd2) || (sd1 == 0 && sd2 == 0)) return 0;
    double v1 = sd1 * sd1 / n1, v2 = sd2 * sd2 / n2; /* squared standard errors of the means */
    *t = (mean1 - mean2) / sqrt(v1 + v2);
    *df = (v1 + v2) * (v1 + v2) / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1));
    *p = rp_t_two_sided_p(*t, *df);
    return 1;
}
